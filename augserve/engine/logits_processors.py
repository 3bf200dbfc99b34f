"""Batched logits processors: grammar masks, min_tokens, logit_bias and the penalties.

Each processor gathers only the rows that use it, so a step with no such request
costs one Python check (`needs_processing`). The order is vLLM's: the grammar's
token bitmask first, then min_tokens and logit_bias, then the repetition, frequency
and presence penalties. Temperature, min_p, top-k and top-p follow in the sampler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from augserve.engine.sampling_params import SamplingParams


@dataclass
class SampleContext:
    """What the processors need to know about one row's request.

    `context_ids`: the whole context (prompt, generated tokens, tool results) up to the
    token being sampled; `output_ids`: the generated tokens only; `stop_ids`: the ids
    `min_tokens` masks (EOS unless ignored, and the request's stop tokens);
    `matcher`: the request's grammar matcher (`engine/grammar.py`), or None."""

    params: SamplingParams
    context_ids: Sequence[int] = ()
    output_ids: Sequence[int] = ()
    stop_ids: tuple[int, ...] = ()
    matcher: Any = None
    masker: Any = None  # the engine's `GrammarMasker`, when `matcher` is set

    @property
    def min_tokens_active(self) -> bool:
        return len(self.output_ids) < self.params.min_tokens and bool(self.stop_ids)


def needs_processing(ctxs: Sequence[SampleContext | None]) -> bool:
    return any(c is not None and _active(c) for c in ctxs)


def _active(c: SampleContext) -> bool:
    return c.matcher is not None or c.min_tokens_active or c.params.has_penalties


@dataclass
class _Rows:
    rows: list[int] = field(default_factory=list)
    ctxs: list[SampleContext] = field(default_factory=list)

    def add(self, row: int, ctx: SampleContext) -> None:
        self.rows.append(row)
        self.ctxs.append(ctx)


def apply_processors(logits: torch.Tensor, ctxs: Sequence[SampleContext | None]) -> None:
    """Apply every row's processors to fp32 `logits` [n, vocab] in place."""
    grammar, min_tok, penalized = _Rows(), _Rows(), _Rows()
    for row, c in enumerate(ctxs):
        if c is None:
            continue
        if c.matcher is not None:
            grammar.add(row, c)
        if c.min_tokens_active:
            min_tok.add(row, c)
        if c.params.has_penalties:
            penalized.add(row, c)
    if grammar.rows:
        grammar.ctxs[0].masker.apply(logits, grammar.rows, [c.matcher for c in grammar.ctxs])
    if min_tok.rows:
        _mask_stop_tokens(logits, min_tok)
    if penalized.rows:
        _apply_bias(logits, penalized)
        _apply_repetition(logits, penalized)
        _apply_presence_frequency(logits, penalized)


def _mask_stop_tokens(logits: torch.Tensor, sel: _Rows) -> None:
    """min_tokens: no EOS / stop token yet. A row the grammar lets only end keeps its end
    (the grammar wins: an output that must end now cannot be made longer)."""
    vocab = logits.shape[-1]
    rows = [r for r, c in zip(sel.rows, sel.ctxs, strict=True) for t in c.stop_ids if t < vocab]
    ids = [t for c in sel.ctxs for t in c.stop_ids if t < vocab]
    if not ids:
        return
    dev = logits.device
    r_idx = torch.tensor(sel.rows, device=dev)
    saved = logits.index_select(0, r_idx)
    logits.index_put_(
        (torch.tensor(rows, device=dev), torch.tensor(ids, device=dev)),
        torch.tensor(float("-inf"), device=dev),
    )
    dead = torch.isneginf(logits.index_select(0, r_idx)).all(dim=-1)
    if bool(dead.any()):
        logits.index_copy_(0, r_idx[dead], saved[dead])


def _apply_bias(logits: torch.Tensor, sel: _Rows) -> None:
    vocab = logits.shape[-1]
    rows, ids, vals = [], [], []
    for r, c in zip(sel.rows, sel.ctxs, strict=True):
        for t, b in c.params.logit_bias:
            if t < vocab:
                rows.append(r)
                ids.append(t)
                vals.append(b)
    if rows:
        dev = logits.device
        idx = (torch.tensor(rows, device=dev), torch.tensor(ids, device=dev))
        logits.index_put_(idx, torch.tensor(vals, device=dev), accumulate=True)


def _padded(seqs: list[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """[rows, max_len] ids (0-padded) and the mask of real entries."""
    width = max(1, max(len(s) for s in seqs))
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    valid = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, s in enumerate(seqs):
        if s:
            ids[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
            valid[i, : len(s)] = True
    return ids.to(device), valid.to(device)


def _apply_repetition(logits: torch.Tensor, sel: _Rows) -> None:
    """HF's RepetitionPenaltyLogitsProcessor over the context (vLLM: prompt + output)."""
    pick = [i for i, c in enumerate(sel.ctxs) if c.params.repetition_penalty != 1.0]
    if not pick:
        return
    dev = logits.device
    rows = torch.tensor([sel.rows[i] for i in pick], device=dev)
    ids, valid = _padded([sel.ctxs[i].context_ids for i in pick], dev)
    penalty = torch.tensor([sel.ctxs[i].params.repetition_penalty for i in pick], device=dev)
    sub = logits.index_select(0, rows)
    seen = torch.zeros_like(sub, dtype=torch.bool).scatter_(1, ids, valid)
    pen = penalty.unsqueeze(1)
    sub = torch.where(seen, torch.where(sub < 0, sub * pen, sub / pen), sub)
    logits.index_copy_(0, rows, sub)


def _apply_presence_frequency(logits: torch.Tensor, sel: _Rows) -> None:
    """OpenAI's: logit -= frequency * count + presence * (count > 0), generated tokens."""
    pick = [
        i for i, c in enumerate(sel.ctxs) if c.params.presence_penalty or c.params.frequency_penalty
    ]
    if not pick:
        return
    dev = logits.device
    rows = torch.tensor([sel.rows[i] for i in pick], device=dev)
    ids, valid = _padded([sel.ctxs[i].output_ids for i in pick], dev)
    sub = logits.index_select(0, rows)
    counts = torch.zeros_like(sub).scatter_add_(1, ids, valid.to(sub.dtype))
    freq = torch.tensor([sel.ctxs[i].params.frequency_penalty for i in pick], device=dev)
    pres = torch.tensor([sel.ctxs[i].params.presence_penalty for i in pick], device=dev)
    sub -= freq.unsqueeze(1) * counts + pres.unsqueeze(1) * (counts > 0).to(sub.dtype)
    logits.index_copy_(0, rows, sub)
