"""Decode attention over the paged KV cache on the native kernels, for any CPU model.

`attention.c`'s `aug_attn_decode` reads each sequence's blocks in place (no gathered or
padded copy), all KV heads of a token at once, in chunks of a context so that one long
sequence still keeps every thread busy (flash-decoding), in float32 math over a float32
or bf16 cache. The torch path (`attention_cpu.decode_cpu`) gathers each group's context
into a padded copy first; `benchmarks/bench_decode_groups.py` times the two side by
side (docs/engine-quant.md, "Native kernels").
"""

from __future__ import annotations

import torch

from augserve.engine.native.build import available, isa, load

CACHE_KINDS = {torch.float32: 0, torch.bfloat16: 1}
ENABLED = [True]  # benchmarks switch it off to time the torch path beside it


def isa_or_none() -> str | None:
    """The kernels' integer dot product (build.isa), None where they do not build."""
    return isa() if available() else None


def usable(q: torch.Tensor, k_cache: torch.Tensor) -> bool:
    """CPU tensors, a float32 or bf16 cache, and the kernels built here."""
    return (
        ENABLED[0]
        and q.device.type == "cpu"
        and k_cache.dtype in CACHE_KINDS
        and q.shape[1] % k_cache.shape[2] == 0
        and available()
    )


def decode(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, tables: torch.Tensor,
    lens: torch.Tensor, scale: float,
) -> torch.Tensor:  # fmt: skip
    """q [B, H, D] -> [B, H, D] in q's dtype. tables [B, nb] (padded), lens [B] int64:
    each sequence's blocks and context length (its new token included)."""
    b, h, d = q.shape
    qf = q.to(torch.float32).contiguous()
    out = torch.empty_like(qf)
    tables, lens = tables.to(torch.int64).contiguous(), lens.to(torch.int64).contiguous()
    load().aug_attn_decode(
        qf.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), CACHE_KINDS[k_cache.dtype],
        tables.data_ptr(), tables.shape[1], lens.data_ptr(), out.data_ptr(), b, h,
        k_cache.shape[2], d, k_cache.shape[1], scale, torch.get_num_threads(),
    )  # fmt: skip
    return out if q.dtype == torch.float32 else out.to(q.dtype)
