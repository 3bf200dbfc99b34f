"""Batched token sampling: greedy, temperature, min-p, top-k, top-p, seeded draws.

The logits come processed (grammar masks, bias, penalties: `logits_processors.py`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from augserve.engine.sampling_params import SamplingParams

_SEED_MIX = 1_000_003


@dataclass(frozen=True)
class Logprob:
    """A sampled token's log-probability and the `k` most likely (id, logprob) pairs."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def logprobs_of(raw: torch.Tensor, tokens: list[int], k: list[int]) -> list[Logprob]:
    """Log-probabilities of `tokens` under the raw logits rows `raw` (vLLM's default
    "raw_logprobs": before any processor, temperature or grammar mask), with each
    row's top `k[i]`."""
    lp = raw.float().log_softmax(dim=-1)
    dev = lp.device
    chosen = lp.gather(1, torch.tensor(tokens, device=dev).unsqueeze(1)).squeeze(1).tolist()
    kmax = min(max(k, default=0), lp.shape[-1])
    top_v, top_i = lp.topk(kmax, dim=-1) if kmax else (None, None)
    out = []
    for row, (tok, val) in enumerate(zip(tokens, chosen, strict=True)):
        top: tuple[tuple[int, float], ...] = ()
        if top_v is not None and top_i is not None and k[row]:
            ids, vals = top_i[row, : k[row]].tolist(), top_v[row, : k[row]].tolist()
            top = tuple(zip(ids, vals, strict=True))
        out.append(Logprob(tok, float(val), top))
    return out


def _filter_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> None:
    """Mask (in place, -inf) tokens outside each row's top-k / nucleus top-p."""
    sorted_logits, sorted_idx = logits.sort(dim=-1, descending=True)
    vocab = logits.shape[-1]
    ranks = torch.arange(vocab, device=logits.device).unsqueeze(0)
    k = torch.where(top_k > 0, top_k, vocab).unsqueeze(1)
    remove = ranks >= k
    probs = sorted_logits.masked_fill(remove, float("-inf")).softmax(dim=-1)
    cum_before = probs.cumsum(dim=-1) - probs
    remove |= cum_before >= top_p.unsqueeze(1)
    remove[:, 0] = False  # always keep the most likely token
    logits.scatter_(1, sorted_idx, sorted_logits.masked_fill(remove, float("-inf")))


def _filter_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> None:
    """Mask (in place) tokens less likely than min_p times the top token (HF MinPLogitsWarper)."""
    probs = logits.softmax(dim=-1)
    top = probs.amax(dim=-1, keepdim=True)
    logits.masked_fill_(probs < min_p.unsqueeze(1) * top, float("-inf"))


def _exponential_noise(
    probs: torch.Tensor, params: list[SamplingParams], positions: list[int]
) -> torch.Tensor:
    """Exp(1) noise per row; seeded rows draw from a generator keyed on (seed, position)."""
    noise = torch.empty_like(probs).exponential_()
    for row, (p, pos) in enumerate(zip(params, positions, strict=True)):
        if p.seed is not None:
            gen = torch.Generator(device=probs.device)
            gen.manual_seed(p.seed * _SEED_MIX + pos)
            noise[row].exponential_(generator=gen)
    return noise


class Sampler:
    """Picks one token per row of a logits matrix."""

    def __call__(
        self,
        logits: torch.Tensor,
        params: list[SamplingParams],
        positions: list[int] | None = None,
    ) -> list[int]:
        """Sample from `logits` [n, vocab] (any float dtype).

        `positions[i]` is the position of the token being sampled for row i
        (used to key seeded draws so they do not depend on batch composition).
        """
        if logits.shape[0] != len(params):
            raise ValueError(f"logits has {logits.shape[0]} rows but {len(params)} params")
        if not params:
            return []
        if positions is None:
            positions = [0] * len(params)
        logits = logits.float()
        out = logits.argmax(dim=-1)
        rand_rows = [i for i, p in enumerate(params) if not p.greedy]
        if rand_rows:
            idx = torch.tensor(rand_rows, device=logits.device)
            sub_params = [params[i] for i in rand_rows]
            sampled = self._sample_random(
                logits.index_select(0, idx), sub_params, [positions[i] for i in rand_rows]
            )
            out.index_copy_(0, idx, sampled)
        return out.tolist()

    @staticmethod
    def _sample_random(
        logits: torch.Tensor, params: list[SamplingParams], positions: list[int]
    ) -> torch.Tensor:
        dev = logits.device
        temp = torch.tensor([p.temperature for p in params], device=dev)
        logits = logits / temp.unsqueeze(1)
        if any(p.min_p > 0.0 for p in params):
            _filter_min_p(logits, torch.tensor([p.min_p for p in params], device=dev))
        top_k = torch.tensor([p.top_k for p in params], device=dev)
        top_p = torch.tensor([p.top_p for p in params], device=dev)
        if bool((top_k > 0).any()) or bool((top_p < 1.0).any()):
            _filter_top_k_top_p(logits, top_k, top_p)
        probs = logits.softmax(dim=-1)
        noise = _exponential_noise(probs, params, positions)
        return (probs / noise).argmax(dim=-1)
