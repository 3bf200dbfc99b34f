"""Decode attention on the CPU, eagerly: a few batched matmuls per layer (docs/engine-quant.md).

The gather-then-SDPA reference (`attention.decode_reference`) costs ~0.6 ms a layer at
one sequence on the 2-core CPU this was measured on: advanced indexing of the cache, a
boolean mask and SDPA's flash kernel run for one query row. Here, per layer: the
sequences' blocks are gathered with one `index_select` per cache, copied once into fp32
[B, kvH, ctx, D], and attended with two batched matmuls (queries grouped by KV head,
GQA without repeating K/V) and a softmax. The per-step part (which blocks, how many
columns, the padding mask) is computed once by the first layer (`plan_for`) and shared
by the others; a single sequence gathers exactly its context and needs no mask.

Sequences are padded to the longest context they are attended with, so a batch whose
contexts differ (agent sessions: 300-1,900 tokens in one step) is split into groups of
similar length (`groups_by_length`), each attended on its own: a decode step of 16
contexts of 200-1,900 tokens took 81.9 ms padded and 35.1 ms in 3 groups
(`benchmarks/bench_decode_groups.py`, docs/engine-quant.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Padding a sequence to its group's longest context costs ~1.25 us a column (a 36 M
# fp32 model, one thread); a group costs a few small ops a layer. A new group starts
# when the next (longer) sequence would add more than this many padded columns.
SPLIT_COLUMNS = 1024


@dataclass(frozen=True)
class DecodeGroup:
    """Sequences attended together: padded to the longest context among them."""

    rows: torch.Tensor | None  # [b] long: their rows in the batch (None: all, in order)
    block_ids: torch.Tensor  # [b * nb] long: each sequence's blocks, row after row
    width: int  # context columns per sequence (the longest context of the group)
    bias: torch.Tensor | None  # [b, 1, 1, width] fp32, 0 or -inf (None: nothing padded)


@dataclass(frozen=True)
class DecodePlan:
    """What every layer's decode attention reads in one step."""

    groups: tuple[DecodeGroup, ...]

    @property
    def width(self) -> int:
        return max(g.width for g in self.groups)


def groups_by_length(n: list[int], split: int | None = None) -> list[list[int]]:
    """Rows in groups of similar context length (ascending): a group closes when the next
    row would pad the ones in it by more than `split` columns in all (default
    `SPLIT_COLUMNS`)."""
    split = SPLIT_COLUMNS if split is None else split
    order = sorted(range(len(n)), key=n.__getitem__)
    groups: list[list[int]] = []
    for i in order:
        g = groups[-1] if groups else None
        if g is not None and len(g) * (n[i] - n[g[-1]]) <= split:
            g.append(i)
        else:
            groups.append([i])
    return groups


def _group(tables: torch.Tensor, n: list[int], rows: list[int], block_size: int,
           whole: bool) -> DecodeGroup:  # fmt: skip
    width = max(n[i] for i in rows)
    nb = -(-width // block_size)
    idx = torch.tensor(rows, dtype=torch.long, device=tables.device)
    ids = (tables[:, :nb] if whole else tables.index_select(0, idx)[:, :nb]).reshape(-1)
    bias = None
    if any(n[i] != width for i in rows):
        lens = torch.tensor([n[i] for i in rows], device=tables.device).view(-1, 1, 1, 1)
        cols = torch.arange(width, device=tables.device).view(1, 1, 1, width)
        bias = torch.zeros(len(rows), 1, 1, width, device=tables.device)
        bias.masked_fill_(cols >= lens, float("-inf"))
    return DecodeGroup(None if whole else idx, ids.contiguous(), width, bias)


def decode_plan(
    tables: torch.Tensor, lens: torch.Tensor, block_size: int, split: int | None = None
) -> DecodePlan:
    """The plan of a step's decodes: tables [B, nb] (padded), lens [B] (context lengths).
    Sequences of similar length share a group; one group holding every row keeps the
    batch's order."""
    n = [int(x) for x in lens.tolist()]
    groups = groups_by_length(n, split)
    if len(groups) == 1:
        return DecodePlan((_group(tables, n, list(range(len(n))), block_size, True),))
    return DecodePlan(tuple(_group(tables, n, g, block_size, False) for g in groups))


def _context(cache: torch.Tensor, g: DecodeGroup, b: int) -> torch.Tensor:
    """[b, kvH, width, D] fp32, contiguous: the group's cached keys or values."""
    kvh, d = cache.shape[2], cache.shape[3]
    rows = cache.index_select(0, g.block_ids).view(b, -1, kvh, d)[:, : g.width]
    return rows.permute(0, 2, 1, 3).to(torch.float32, memory_format=torch.contiguous_format)


def _attend(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, g: DecodeGroup,
            scale: float) -> torch.Tensor:  # fmt: skip
    """One group: q [b, H, D] -> [b, H, D] fp32."""
    b, h, d = q.shape
    kvh = k_cache.shape[2]
    qg = (q.float() * scale).view(b, kvh, h // kvh, d)
    scores = torch.matmul(qg, _context(k_cache, g, b).transpose(-1, -2))  # [b, kvH, g, w]
    if g.bias is not None:
        scores = scores + g.bias
    return torch.matmul(scores.softmax(-1), _context(v_cache, g, b)).view(b, h, d)


def decode_cpu(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: DecodePlan, scale: float
) -> torch.Tensor:
    """q [B, H, D] -> [B, H, D] in q's dtype; fp32 math (see the module doc)."""
    if len(plan.groups) == 1 and plan.groups[0].rows is None:
        return _attend(q, k_cache, v_cache, plan.groups[0], scale).to(q.dtype)
    out = torch.empty_like(q)
    for g in plan.groups:
        assert g.rows is not None
        res = _attend(q.index_select(0, g.rows), k_cache, v_cache, g, scale)
        out.index_copy_(0, g.rows, res.to(q.dtype))
    return out
