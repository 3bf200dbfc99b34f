"""Paged KV cache: one preallocated K and V tensor per layer plus a host swap pool.

Device tensors have shape [num_blocks, block_size, kv_heads, head_dim]; the
host pool has the same block shape (pinned when the device is CUDA). Swaps
are whole-block copies, one gather and one copy per layer (`swap_out`, `swap_in`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class KVCacheConfig:
    """KV sizing: exactly one of num_device_blocks / kv_cache_memory (bytes)."""

    block_size: int = 16
    num_device_blocks: int | None = None
    kv_cache_memory: int | None = None
    num_host_blocks: int = 0

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if (self.num_device_blocks is None) == (self.kv_cache_memory is None):
            raise ValueError("set exactly one of num_device_blocks and kv_cache_memory")
        if self.num_device_blocks is not None and self.num_device_blocks < 1:
            raise ValueError(f"num_device_blocks must be >= 1, got {self.num_device_blocks}")
        if self.kv_cache_memory is not None and self.kv_cache_memory < 1:
            raise ValueError(f"kv_cache_memory must be >= 1 byte, got {self.kv_cache_memory}")
        if self.num_host_blocks < 0:
            raise ValueError(f"num_host_blocks must be >= 0, got {self.num_host_blocks}")


def kv_bytes_per_token(num_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """Bytes of K plus V for one token over all layers."""
    elem = torch.empty((), dtype=dtype).element_size()
    return 2 * num_layers * kv_heads * head_dim * elem


class KVCache:
    """Per-layer paged K/V tensors on the device and a same-shaped host pool."""

    def __init__(
        self,
        cfg: KVCacheConfig,
        num_layers: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        scratch: bool = False,
    ) -> None:
        """scratch: one more device block, after the usable ones, that no sequence owns
        (`scratch_block`; CUDA graphs point their padding rows at it)."""
        self.block_size = cfg.block_size
        self.bytes_per_token = kv_bytes_per_token(num_layers, kv_heads, head_dim, dtype)
        if cfg.num_device_blocks is not None:
            n_dev = cfg.num_device_blocks
        else:
            assert cfg.kv_cache_memory is not None
            n_dev = cfg.kv_cache_memory // (self.bytes_per_token * cfg.block_size)
            if n_dev < 1:
                raise ValueError(
                    f"kv_cache_memory={cfg.kv_cache_memory} bytes is less than one block "
                    f"({self.bytes_per_token * cfg.block_size} bytes)"
                )
        self.num_device_blocks = n_dev
        self.num_host_blocks = cfg.num_host_blocks
        self.scratch_block = n_dev if scratch else None
        shape = (n_dev + int(scratch), cfg.block_size, kv_heads, head_dim)
        host_shape = (cfg.num_host_blocks, cfg.block_size, kv_heads, head_dim)
        pin = device.type == "cuda"
        self.k_caches = [zeros(shape, dtype, device) for _ in range(num_layers)]
        self.v_caches = [zeros(shape, dtype, device) for _ in range(num_layers)]
        self.k_host = [zeros(host_shape, dtype, None, pin) for _ in range(num_layers)]
        self.v_host = [zeros(host_shape, dtype, None, pin) for _ in range(num_layers)]
        self.device = device

    def _check(self, pairs: list[tuple[int, int]], n_src: int, n_dst: int, what: str) -> None:
        for src, dst in pairs:
            if not (0 <= src < n_src and 0 <= dst < n_dst):
                raise ValueError(f"{what}: block pair ({src}, {dst}) out of range")

    def swap_out(self, pairs: list[tuple[int, int]]) -> None:
        """Copy device blocks to host blocks: pairs of (device_block, host_block).

        On CUDA the gathered blocks go straight into the pinned pool when the host
        blocks form one run (else through a pinned staging buffer), one sync at the
        end; a pageable intermediate would cut the copy rate several times."""
        if not pairs:
            return
        self._check(pairs, self.num_device_blocks, self.num_host_blocks, "swap_out")
        src = torch.tensor([p[0] for p in pairs], device=self.device)
        dst = [p[1] for p in pairs]
        run, pinned = _as_run(dst), self.device.type == "cuda"
        staged: list[tuple[torch.Tensor, torch.Tensor]] = []
        for dev_t, host_t in zip(
            self.k_caches + self.v_caches, self.k_host + self.v_host, strict=True
        ):
            moved = dev_t.index_select(0, src)
            if run is not None:
                host_t[run].copy_(moved, non_blocking=pinned)
            else:
                buf = torch.empty(moved.shape, dtype=moved.dtype, pin_memory=pinned)
                staged.append((host_t, buf.copy_(moved, non_blocking=pinned)))
        if pinned:
            torch.cuda.synchronize(self.device)
        if staged:
            dst_t = torch.tensor(dst)
            for host_t, buf in staged:
                host_t.index_copy_(0, dst_t, buf)

    def swap_in(self, pairs: list[tuple[int, int]]) -> None:
        """Copy host blocks to device blocks: pairs of (host_block, device_block).

        On CUDA a run of host blocks is copied from the pinned pool as it lies (else
        gathered into a pinned staging buffer first), asynchronously: later kernels on
        the stream see the blocks, the host does not wait."""
        if not pairs:
            return
        self._check(pairs, self.num_host_blocks, self.num_device_blocks, "swap_in")
        src = [p[0] for p in pairs]
        dst = torch.tensor([p[1] for p in pairs], device=self.device)
        run, pinned = _as_run(src), self.device.type == "cuda"
        src_t = torch.tensor(src) if run is None else None
        for dev_t, host_t in zip(
            self.k_caches + self.v_caches, self.k_host + self.v_host, strict=True
        ):
            if run is not None:
                moved = host_t[run]
            else:
                shape = (len(src), *host_t.shape[1:])
                moved = torch.empty(shape, dtype=host_t.dtype, pin_memory=pinned)
                assert src_t is not None
                torch.index_select(host_t, 0, src_t, out=moved)
            dev_t.index_copy_(0, dst, moved.to(self.device, non_blocking=pinned))


def zeros(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | None, pin: bool = False
) -> torch.Tensor:
    """A zeroed cache tensor. On the CPU (unpinned) its memory comes from calloc, whose
    large blocks are fresh zero pages mapped on first touch: a cache costs resident
    memory as it fills, not when allocated (torch.zeros writes every page at once)."""
    n = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
    if pin or n == 0 or (device is not None and device.type != "cpu"):
        return torch.zeros(shape, dtype=dtype, device=device, pin_memory=pin)
    return torch.from_numpy(np.zeros(n, dtype=np.uint8)).view(dtype).view(shape)


def _as_run(ids: list[int]) -> slice | None:
    """ids as a slice when they are consecutive and ascending, else None."""
    first = ids[0]
    if all(b == first + i for i, b in enumerate(ids)):
        return slice(first, first + len(ids))
    return None
