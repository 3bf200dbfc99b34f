"""`--gpu-memory-utilization`: the KV cache sized from the device's memory, as vLLM does.

vLLM gives the instance `utilization x total` of the GPU's memory and the KV cache
what the weights and the peak activations leave of it. Here, on CUDA, the same:
`utilization x total - weights - activations`, and never more than is free. On CPU
the "device memory" is the RAM that was free when the server started (MemAvailable
plus the weights just loaded), so `--gpu-memory-utilization 0.5` leaves half of the
free RAM to the rest of the machine. The activations are an estimate (no profiling
forward): `max_batch_tokens x 4 bytes x (vocab + 64 x widest layer)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

CUDA_SLACK = 256 * 2**20  # allocator fragmentation and the kernels' workspaces


def _meminfo() -> tuple[int, int]:
    """(MemAvailable, MemTotal) in bytes from /proc/meminfo (sysconf elsewhere)."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        return int(fields["MemAvailable"].split()[0]) * 1024, int(
            fields["MemTotal"].split()[0]
        ) * 1024
    except (OSError, KeyError, ValueError):
        import os

        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


def device_memory(device: torch.device) -> tuple[int, int]:
    """(free, total) bytes of `device` now."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return int(free), int(total)
    return _meminfo()


def model_bytes(model: Any) -> int:
    return sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))


def activation_bytes(model: Any, max_batch_tokens: int) -> int:
    widest = max((p.shape[-1] for p in model.parameters() if p.dim() == 2), default=0)
    widest = max([widest, *(int(getattr(m, "in_features", 0)) for m in model.modules())])
    return max_batch_tokens * 4 * (int(model.vocab_size) + 64 * int(widest))


def kv_cache_bytes(
    utilization: float,
    device: torch.device,
    free: int,
    total: int,
    weights: int,
    activations: int,
) -> int:
    """The KV cache's bytes for `utilization`, from the device's (free, total) memory
    measured with the weights loaded. Raises ValueError when nothing is left."""
    if not 0.0 < utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {utilization}")
    if device.type == "cuda":
        budget = min(int(utilization * total) - weights, free) - activations - CUDA_SLACK
        where = f"{total / 2**30:.1f} GiB of device memory"
    else:
        budget = int(utilization * (free + weights)) - weights - activations
        where = f"{(free + weights) / 2**30:.1f} GiB of free RAM"
    if budget < 1:
        raise ValueError(
            f"gpu_memory_utilization={utilization}: {where} leaves no room for the KV "
            f"cache after {weights / 2**30:.2f} GiB of weights and "
            f"{activations / 2**30:.2f} GiB of activations (raise it, or give "
            f"kv_cache_memory_bytes)"
        )
    return budget
