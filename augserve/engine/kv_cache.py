"""Paged KV cache: one preallocated K and V tensor per layer plus a host swap pool.

Device tensors have shape [num_blocks, block_size, kv_heads, head_dim]; the
host pool has the same block shape (pinned when the device is CUDA). Swaps
are whole-block copies done with one index_select / index_copy per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    ) -> None:
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
        shape = (n_dev, cfg.block_size, kv_heads, head_dim)
        host_shape = (cfg.num_host_blocks, cfg.block_size, kv_heads, head_dim)
        pin = device.type == "cuda"
        self.k_caches = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v_caches = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.k_host = [
            torch.zeros(host_shape, dtype=dtype, pin_memory=pin) for _ in range(num_layers)
        ]
        self.v_host = [
            torch.zeros(host_shape, dtype=dtype, pin_memory=pin) for _ in range(num_layers)
        ]
        self.device = device

    def _check(self, pairs: list[tuple[int, int]], n_src: int, n_dst: int, what: str) -> None:
        for src, dst in pairs:
            if not (0 <= src < n_src and 0 <= dst < n_dst):
                raise ValueError(f"{what}: block pair ({src}, {dst}) out of range")

    def swap_out(self, pairs: list[tuple[int, int]]) -> None:
        """Copy device blocks to host blocks: pairs of (device_block, host_block)."""
        if not pairs:
            return
        self._check(pairs, self.num_device_blocks, self.num_host_blocks, "swap_out")
        src = torch.tensor([p[0] for p in pairs], device=self.device)
        dst = torch.tensor([p[1] for p in pairs])
        for dev_t, host_t in zip(
            self.k_caches + self.v_caches, self.k_host + self.v_host, strict=True
        ):
            host_t.index_copy_(0, dst, dev_t.index_select(0, src).to("cpu"))

    def swap_in(self, pairs: list[tuple[int, int]]) -> None:
        """Copy host blocks to device blocks: pairs of (host_block, device_block)."""
        if not pairs:
            return
        self._check(pairs, self.num_host_blocks, self.num_device_blocks, "swap_in")
        src = torch.tensor([p[0] for p in pairs])
        dst = torch.tensor([p[1] for p in pairs], device=self.device)
        nb = self.device.type == "cuda"
        for dev_t, host_t in zip(
            self.k_caches + self.v_caches, self.k_host + self.v_host, strict=True
        ):
            moved = host_t.index_select(0, src)
            if nb:
                moved = moved.pin_memory()
            dev_t.index_copy_(0, dst, moved.to(self.device, non_blocking=nb))

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Device-to-device block copies (src, dst), e.g. for copy-on-write."""
        if not pairs:
            return
        self._check(pairs, self.num_device_blocks, self.num_device_blocks, "copy_blocks")
        src = torch.tensor([p[0] for p in pairs], device=self.device)
        dst = torch.tensor([p[1] for p in pairs], device=self.device)
        for t in self.k_caches + self.v_caches:
            t.index_copy_(0, dst, t.index_select(0, src))
