"""Decode attention on the CPU, eagerly: a few batched matmuls per layer (docs/engine-quant.md).

The gather-then-SDPA reference (`attention.decode_reference`) costs ~0.6 ms a layer at
one sequence on the 2-core CPU this was measured on: advanced indexing of the cache, a
boolean mask and SDPA's flash kernel run for one query row. Here, per layer: the
sequences' blocks are gathered with one `index_select` per cache, copied once into fp32
[B, kvH, ctx, D], and attended with two batched matmuls (queries grouped by KV head,
GQA without repeating K/V) and a softmax. The per-step part (which blocks, how many
columns, the padding mask) is computed once by the first layer (`plan_for`) and shared
by the others; a single sequence gathers exactly its context and needs no mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DecodePlan:
    """What every layer's decode attention reads in one step."""

    block_ids: torch.Tensor  # [B * nb] long: each sequence's blocks, row after row
    width: int  # context columns per sequence (the context itself for one sequence)
    bias: torch.Tensor | None  # [B, 1, 1, width] fp32, 0 or -inf (None: nothing padded)


def decode_plan(tables: torch.Tensor, lens: torch.Tensor, block_size: int) -> DecodePlan:
    """The plan of a step's decodes: tables [B, nb] (padded), lens [B] (context lengths)."""
    n = [int(x) for x in lens.tolist()]
    if len(n) == 1:
        nb = -(-n[0] // block_size)
        return DecodePlan(tables[0, :nb].contiguous(), n[0], None)
    width = tables.shape[1] * block_size
    cols = torch.arange(width, device=lens.device).view(1, 1, 1, width)
    bias = torch.zeros(len(n), 1, 1, width, device=lens.device)
    bias.masked_fill_(cols >= lens.view(-1, 1, 1, 1), float("-inf"))
    return DecodePlan(tables.reshape(-1), width, bias)


def _context(cache: torch.Tensor, plan: DecodePlan, b: int) -> torch.Tensor:
    """[B, kvH, width, D] fp32, contiguous: the sequences' cached keys or values."""
    kvh, d = cache.shape[2], cache.shape[3]
    rows = cache.index_select(0, plan.block_ids).view(b, -1, kvh, d)[:, : plan.width]
    return rows.permute(0, 2, 1, 3).to(torch.float32, memory_format=torch.contiguous_format)


def decode_cpu(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: DecodePlan, scale: float
) -> torch.Tensor:
    """q [B, H, D] -> [B, H, D] in q's dtype; fp32 math (see the module doc)."""
    b, h, d = q.shape
    kvh = k_cache.shape[2]
    qg = (q.float() * scale).view(b, kvh, h // kvh, d)
    scores = torch.matmul(qg, _context(k_cache, plan, b).transpose(-1, -2))  # [B, kvH, g, w]
    if plan.bias is not None:
        scores = scores + plan.bias
    out = torch.matmul(scores.softmax(-1), _context(v_cache, plan, b))  # [B, kvH, g, D]
    return out.view(b, h, d).to(q.dtype)
