"""KV block accounting, without tensors: device blocks and host swap blocks.

The pool only knows which blocks are free; the requests hold their own block
lists (`Request.block_ids`, `Request.host_block_ids`). The engine mirrors every
move the scheduler orders with real tensor copies.

Device blocks are reference-counted, after vLLM v1's `BlockPool`: a block may
be shared by several requests whose contexts start with the same tokens (the
prefix cache, `sched/prefix_cache.py`). A full block whose tokens are known
carries a hash; when its last holder lets it go it stays *cached free*: it
counts as free, keeps its KV, and a later request with the same prefix may
take it again (`touch`). Allocation takes never-cached free blocks first, then
evicts cached free blocks least recently freed first (a request's last block
is freed first, so its prefix outlives its tail). Host blocks are private to
one request and never shared.
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


class DeviceBlocks(_FreeList):
    """Device blocks: in use (`ref_count` > 0), free, or cached free (hash kept, LRU)."""

    def __init__(self, num_blocks: int) -> None:
        super().__init__(num_blocks, "device")
        self.ref_count = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}  # block hash -> block id
        self._evictable: dict[int, None] = {}  # cached free blocks, least recent first
        self.num_evictions = 0

    @property
    def num_free(self) -> int:
        """Blocks an allocation may take: free and cached free."""
        return len(self._free) + len(self._evictable)

    @property
    def num_cached_free(self) -> int:
        """Cached free blocks: free to take, but holding KV a later prefix may hit."""
        return len(self._evictable)

    def allocate(self, n: int) -> list[int]:
        if n > self.num_free:
            raise OutOfBlocks(f"need {n} device blocks, {self.num_free} free")
        if n <= 0:
            return []
        plain = min(n, len(self._free))
        taken = super().allocate(plain)
        for _ in range(n - plain):
            taken.append(self._evict_oldest())
        ref = self.ref_count
        for b in taken:
            ref[b] = 1
        return taken

    def _evict_oldest(self) -> int:
        b = next(iter(self._evictable))
        del self._evictable[b]
        h = self.block_hash[b]
        assert h is not None
        del self.cached[h]
        self.block_hash[b] = None
        self.num_evictions += 1
        return b

    def free(self, block_ids: list[int]) -> None:
        """Drop one reference to each block; a block nobody holds becomes free, or
        cached free if it has a hash (the last block first, so it is evicted first)."""
        ref, hashes = self.ref_count, self.block_hash
        for b in reversed(block_ids):
            left = ref[b] - 1
            if left < 0:
                raise RuntimeError(f"device block {b} freed more often than allocated")
            ref[b] = left
            if left == 0:
                if hashes[b] is not None:
                    self._evictable[b] = None
                else:
                    self._free.append(b)

    def touch(self, block_ids: list[int]) -> None:
        """One more holder for each (cached) block: a prefix-cache hit."""
        ref = self.ref_count
        for b in block_ids:
            if ref[b] == 0:
                del self._evictable[b]
            ref[b] += 1

    def cache_block(self, block_id: int, block_hash: int) -> None:
        """Remember the full block `block_id` under `block_hash` (a block already cached
        under that hash wins: the duplicate stays uncached, as in vLLM)."""
        if self.block_hash[block_id] is None and block_hash not in self.cached:
            self.block_hash[block_id] = block_hash
            self.cached[block_hash] = block_id

    def free_ids(self) -> list[int]:
        return [*self._free, *self._evictable]

    def evictable_ids(self) -> list[int]:
        return list(self._evictable)


class BlockPool:
    """Device blocks (reference-counted, with a prefix cache) and host swap blocks of
    `block_size` tokens each."""

    def __init__(self, num_device_blocks: int, num_host_blocks: int, block_size: int) -> None:
        if num_device_blocks <= 0:
            raise ValueError(f"BlockPool.num_device_blocks must be > 0, got {num_device_blocks}")
        if num_host_blocks < 0:
            raise ValueError(f"BlockPool.num_host_blocks must be >= 0, got {num_host_blocks}")
        if block_size <= 0:
            raise ValueError(f"BlockPool.block_size must be > 0, got {block_size}")
        self.block_size = block_size
        self.device = DeviceBlocks(num_device_blocks)
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
