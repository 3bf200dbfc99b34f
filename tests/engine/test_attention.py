"""Paged attention against a naive per-sequence reference: GQA and MHA, a mixed batch of
decodes, fresh prompts and later chunks, the plain path, the block-wise kernel run
eagerly, and the block-wise kernel compiled by inductor (reading the cache in place)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch

from augserve.engine.attention import (
    build_metadata,
    compiled_decode,
    decode_paged,
    decode_reference,
    paged_attention,
)

D, BS = 8, 4
CPU = torch.device("cpu")
# (start_pos, n_new, block_table): three decodes, a fresh prefill, a continued chunk
SEQS = [
    (9, 1, [3, 7, 1]),
    (2, 1, [5]),
    (14, 1, [2, 13, 14, 15]),
    (0, 6, [8, 9]),
    (5, 7, [10, 11, 12]),
]


def _reference(qs: torch.Tensor, ks: torch.Tensor, vs: torch.Tensor, start: int) -> torch.Tensor:
    """q [n, H, D] at positions start.., k/v [ctx, KVH, D] -> [n, H, D], one sequence."""
    h, kvh = qs.shape[1], ks.shape[1]
    k = ks.repeat_interleave(h // kvh, dim=1)
    v = vs.repeat_interleave(h // kvh, dim=1)
    scores = torch.einsum("nhd,chd->hnc", qs, k) * D**-0.5
    n, ctx = qs.shape[0], ks.shape[0]
    allowed = torch.arange(ctx).unsqueeze(0) <= torch.arange(start, start + n).unsqueeze(1)
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("hnc,chd->nhd", scores.softmax(-1), v)


def _case(h: int, kvh: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Caches holding each sequence's old context, plus q and the new k/v of the step."""
    g = torch.Generator().manual_seed(seed)
    k_cache = torch.randn(32, BS, kvh, D, generator=g)  # garbage outside the contexts
    v_cache = torch.randn(32, BS, kvh, D, generator=g)
    full_k = [torch.randn(s + n, kvh, D, generator=g) for s, n, _ in SEQS]
    full_v = [torch.randn(s + n, kvh, D, generator=g) for s, n, _ in SEQS]
    for (s, _, bt), fk, fv in zip(SEQS, full_k, full_v, strict=True):
        for p in range(s):
            k_cache[bt[p // BS], p % BS] = fk[p]
            v_cache[bt[p // BS], p % BS] = fv[p]
    q = torch.randn(sum(n for _, n, _ in SEQS), h, D, generator=g)
    new_k = torch.cat([fk[s:] for (s, _, _), fk in zip(SEQS, full_k, strict=True)])
    new_v = torch.cat([fv[s:] for (s, _, _), fv in zip(SEQS, full_v, strict=True)])
    return q, new_k, new_v, k_cache, v_cache, *full_k, *full_v


@pytest.mark.parametrize(("h", "kvh"), [(4, 2), (4, 4)])
@pytest.mark.parametrize("compiled", [False, True])
def test_mixed_batch_matches_reference(h: int, kvh: int, compiled: bool) -> None:
    q, new_k, new_v, k_cache, v_cache, *fulls = _case(h, kvh)
    full_k, full_v = fulls[: len(SEQS)], fulls[len(SEQS) :]
    meta = build_metadata(
        [(s, bt) for s, n, bt in SEQS if n == 1],
        [(s, n, bt) for s, n, bt in SEQS if n > 1],
        BS,
        CPU,
        compiled,
    )
    out = paged_attention(q, new_k, new_v, k_cache, v_cache, meta, D**-0.5)
    tok = 0
    for (s, n, bt), fk, fv in zip(SEQS, full_k, full_v, strict=True):
        ref = _reference(q[tok : tok + n], fk, fv, s)
        torch.testing.assert_close(out[tok : tok + n], ref, atol=1e-5, rtol=1e-5)
        for p in range(s, s + n):  # the new k/v were written into their slots
            assert torch.equal(k_cache[bt[p // BS], p % BS], fk[p])
            assert torch.equal(v_cache[bt[p // BS], p % BS], fv[p])
        tok += n


def _decode_inputs(b: int, nb: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    k_cache, v_cache = torch.randn(2, 64, BS, 2, D, generator=g)
    tables = torch.randperm(64, generator=g)[: b * nb].view(b, nb)
    lens = torch.randint(1, nb * BS + 1, (b,), generator=g)
    return torch.randn(b, 4, D, generator=g), k_cache, v_cache, tables, lens


def test_blockwise_kernel_equals_reference_eagerly_and_compiled() -> None:
    """The compiled kernel serves new batch sizes and context widths without error and
    agrees with the gather-then-SDPA reference; padded table entries never count."""
    fn = compiled_decode()
    for i, (b, nb) in enumerate([(3, 5), (7, 2), (2, 9)]):
        q, k_cache, v_cache, tables, lens = _decode_inputs(b, nb, seed=i)
        ref = decode_reference(q, k_cache, v_cache, tables, lens, D**-0.5)
        torch.testing.assert_close(decode_paged(q, k_cache, v_cache, tables, lens, D**-0.5), ref)
        torch.testing.assert_close(fn(q, k_cache, v_cache, tables, lens, D**-0.5), ref)
        padded = tables.clone()
        for row, n in enumerate(lens.tolist()):
            padded[row, (n + BS - 1) // BS :] = 0  # what build_metadata pads with
        torch.testing.assert_close(fn(q, k_cache, v_cache, padded, lens, D**-0.5), ref)


@contextlib.contextmanager
def torch_decode() -> Iterator[None]:
    """CPU decodes on attention_cpu.decode_cpu, not the native kernel, inside."""
    from augserve.engine.native import attention as native_attention

    native_attention.ENABLED[0] = False
    try:
        yield
    finally:
        native_attention.ENABLED[0] = True


def test_decode_backend_choice() -> None:
    """CPU: the compiled block-wise kernel, else the native kernel for float32 / bf16
    caches where it builds, else the batched matmuls; CUDA with fp16/bf16 (no flash-attn
    installed): gather + SDPA; CUDA fp32: the block-wise kernel."""
    from augserve.engine.attention import decode_backend
    from augserve.engine.native import attention as native_attention

    cuda = torch.device("cuda")
    assert decode_backend(CPU, torch.float32, 16, True) == "paged-compiled"
    native = "cpu-native" if native_attention.isa_or_none() else "cpu-bmm"
    assert decode_backend(CPU, torch.bfloat16, 16, False) == native
    assert decode_backend(CPU, torch.float16, 16, False) == "cpu-bmm"
    native_attention.ENABLED[0] = False
    try:
        assert decode_backend(CPU, torch.float32, 16, False) == "cpu-bmm"
    finally:
        native_attention.ENABLED[0] = True
    assert decode_backend(cuda, torch.float32, 16, True) == "paged-compiled"
    for half in (torch.bfloat16, torch.float16):
        assert decode_backend(cuda, half, 16, True) in ("gather-sdpa", "flash-attn")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_decode_equals_reference_for_one_and_many_sequences(dtype: torch.dtype) -> None:
    """attention_cpu.decode_cpu (what CPU decode steps run eagerly): one sequence gathers
    exactly its blocks (no mask), several a padded table with a mask; both equal the
    gather-then-SDPA reference, GQA included; the plan is made once per step."""
    from augserve.engine.attention_cpu import decode_cpu, decode_plan

    for i, (b, nb) in enumerate([(1, 5), (1, 1), (4, 3)]):
        q, k_cache, v_cache, tables, lens = (t for t in _decode_inputs(b, nb, seed=10 + i))
        q, k_cache, v_cache = q.to(dtype), k_cache.to(dtype), v_cache.to(dtype)
        plan = decode_plan(tables, lens, BS)
        (group,) = plan.groups  # short contexts: one group, in the batch's order
        assert group.rows is None and (group.bias is None) == (b == 1)
        if b == 1:
            assert group.width == int(lens[0]) and len(group.block_ids) == -(-int(lens[0]) // BS)
        ref = decode_reference(q.float(), k_cache.float(), v_cache.float(), tables, lens, 0.3)
        got = decode_cpu(q, k_cache, v_cache, plan, 0.3)
        assert got.dtype == dtype
        tol = 1e-5 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(got.float(), ref, atol=tol, rtol=tol)
    meta = build_metadata([(9, [3, 7, 1])], [], BS, CPU)
    k_cache, v_cache = torch.randn(2, 32, BS, 2, D)
    q, k, v = torch.randn(1, 4, D), torch.randn(1, 2, D), torch.randn(1, 2, D)
    with torch_decode():  # the torch path plans; the native kernel needs no plan
        paged_attention(q, k, v, k_cache, v_cache, meta, 0.3)
    assert meta.cpu_plan is not None and meta.cpu_plan.width == 10


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_decode_of_mixed_lengths_attends_in_groups_and_equals_the_reference(
    dtype: torch.dtype,
) -> None:
    """Contexts of very different lengths in one step are split into groups of similar
    length (each padded only to its own longest), attended group by group and written
    back in the batch's order; the result is the reference's."""
    from augserve.engine.attention_cpu import decode_cpu, decode_plan, groups_by_length

    g = torch.Generator().manual_seed(7)
    nb, b = 40, 6  # up to 160 tokens of context (blocks of 4)
    k_cache, v_cache = (t.to(dtype) for t in torch.randn(2, b * nb, BS, 2, D, generator=g))
    tables = torch.randperm(b * nb, generator=g).view(b, nb)
    lens = torch.tensor([150, 5, 152, 12, 80, 9])
    q = torch.randn(b, 4, D, generator=g).to(dtype)
    assert groups_by_length(lens.tolist(), split=16) == [[1, 5, 3], [4], [0, 2]]
    plan = decode_plan(tables, lens, BS, split=16)
    assert [g.width for g in plan.groups] == [12, 80, 152]
    assert plan.groups[1].bias is None  # a group of one is attended unpadded
    ref = decode_reference(q.float(), k_cache.float(), v_cache.float(), tables, lens, 0.3)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(decode_cpu(q, k_cache, v_cache, plan, 0.3).float(), ref,
                               atol=tol, rtol=tol)  # fmt: skip
    assert len(decode_plan(tables, lens, BS, split=10_000).groups) == 1  # one padded batch
