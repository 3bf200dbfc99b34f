"""KV block accounting, without tensors: device blocks and host swap blocks.

The pool only knows which blocks are free; the requests hold their own block
lists (`Request.block_ids`, `Request.host_block_ids`). The engine mirrors every
move the scheduler orders with real tensor copies.
"""

from __future__ import annotations


class OutOfBlocks(RuntimeError):
    pass


class _FreeList:
    def __init__(self, num_blocks: int, kind: str) -> None:
        self.num_blocks = num_blocks
        self.kind = kind
        # Pop from the end: low block ids are handed out first.
        self._free = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        if n > len(self._free):
            raise OutOfBlocks(f"need {n} {self.kind} blocks, {len(self._free)} free")
        if n <= 0:
            return []
        taken = self._free[-n:]
        del self._free[-n:]
        taken.reverse()
        return taken

    def free(self, block_ids: list[int]) -> None:
        self._free.extend(reversed(block_ids))

    def free_ids(self) -> list[int]:
        return list(self._free)


class BlockPool:
    """Free lists of device and host KV blocks of `block_size` tokens each."""

    def __init__(self, num_device_blocks: int, num_host_blocks: int, block_size: int) -> None:
        if num_device_blocks <= 0:
            raise ValueError(f"BlockPool.num_device_blocks must be > 0, got {num_device_blocks}")
        if num_host_blocks < 0:
            raise ValueError(f"BlockPool.num_host_blocks must be >= 0, got {num_host_blocks}")
        if block_size <= 0:
            raise ValueError(f"BlockPool.block_size must be > 0, got {block_size}")
        self.block_size = block_size
        self.device = _FreeList(num_device_blocks, "device")
        self.host = _FreeList(num_host_blocks, "host")

    @property
    def num_device_blocks(self) -> int:
        return self.device.num_blocks

    @property
    def num_host_blocks(self) -> int:
        return self.host.num_blocks

    @property
    def num_free_device(self) -> int:
        return self.device.num_free

    @property
    def num_free_host(self) -> int:
        return self.host.num_free

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold `num_tokens` tokens."""
        return -(-num_tokens // self.block_size)
