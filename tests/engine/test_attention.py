"""paged_attention against a naive per-sequence reference (GQA, mixed batch, both CPU paths)."""

from __future__ import annotations

import pytest
import torch

from augserve.engine import attention
from augserve.engine.attention import build_metadata, paged_attention

H, KVH, D, BS = 4, 2, 8, 4


def _reference(qs: torch.Tensor, ks: torch.Tensor, vs: torch.Tensor, start: int) -> torch.Tensor:
    """q [n, H, D] at positions start.., k/v [ctx, KVH, D] -> [n, H, D]."""
    k = ks.repeat_interleave(H // KVH, dim=1)
    v = vs.repeat_interleave(H // KVH, dim=1)
    scores = torch.einsum("nhd,chd->hnc", qs, k) * D**-0.5
    n, ctx = qs.shape[0], ks.shape[0]
    allowed = torch.arange(ctx).unsqueeze(0) <= torch.arange(start, start + n).unsqueeze(1)
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("hnc,chd->nhd", scores.softmax(-1), v)


@pytest.mark.parametrize("force_sdpa", [False, True])
def test_mixed_batch_matches_reference(monkeypatch: pytest.MonkeyPatch, force_sdpa: bool) -> None:
    if force_sdpa:
        monkeypatch.setattr(attention, "_MANUAL_MAX_SCORES", 0)
    g = torch.Generator().manual_seed(0)
    k_cache = torch.zeros(32, BS, KVH, D)
    v_cache = torch.zeros(32, BS, KVH, D)
    # (start_pos, n_new, block_table): two decodes, a fresh prefill, a continued chunk
    seqs = [(9, 1, [3, 7, 1]), (2, 1, [5]), (0, 6, [8, 9]), (5, 7, [10, 11, 12])]
    full_k = [torch.randn(s + n, KVH, D, generator=g) for s, n, _ in seqs]
    full_v = [torch.randn(s + n, KVH, D, generator=g) for s, n, _ in seqs]
    for (s, _, bt), fk, fv in zip(seqs, full_k, full_v, strict=True):  # pre-fill old context
        for p in range(s):
            k_cache[bt[p // BS], p % BS] = fk[p]
            v_cache[bt[p // BS], p % BS] = fv[p]
    q = torch.randn(sum(n for _, n, _ in seqs), H, D, generator=g)
    new_k = torch.cat([fk[s:] for (s, _, _), fk in zip(seqs, full_k, strict=True)])
    new_v = torch.cat([fv[s:] for (s, _, _), fv in zip(seqs, full_v, strict=True)])
    meta = build_metadata(
        [(s, bt) for s, n, bt in seqs if n == 1],
        [(s, n, bt) for s, n, bt in seqs if n > 1],
        BS,
        torch.device("cpu"),
    )
    out = paged_attention(q, new_k, new_v, k_cache, v_cache, meta, D**-0.5)
    tok = 0
    for (s, n, _), fk, fv in zip(seqs, full_k, full_v, strict=True):
        ref = _reference(q[tok : tok + n], fk, fv, s)
        torch.testing.assert_close(out[tok : tok + n], ref, atol=1e-5, rtol=1e-5)
        tok += n
