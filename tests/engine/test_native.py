"""The native CPU kernels (engine/native/): the block formats and the integer products
against a dequantize-then-matmul reference on the same int8 activations (every ISA
variant this CPU can run), the paged decode attention against torch's, and the fused
decode step against the dequantized float32 model; how the library is built and when
it is not used."""

from __future__ import annotations

import ctypes
import platform
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from augserve.engine.attention import decode_reference
from augserve.engine.gguf_quant import qtensor_from_gguf
from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner, SeqChunk
from augserve.engine.native import build
from augserve.engine.native import qmatrix as nq
from augserve.engine.quant import QTensor, QuantLinear
from augserve.engine.quant_select import cpu_flags
from augserve.engine.resolve import resolve_model
from augserve.engine.runner_config import RunnerConfig
from tests.engine.gguf_helpers import write_gguf

pytestmark = pytest.mark.skipif(
    build.compiler() is None, reason="no C compiler: the native kernels cannot be built"
)

X86 = platform.machine() in ("x86_64", "AMD64")
# (flags, what the CPU needs to run the build): each variant is its own library
VARIANTS = [
    ("-march=native", set()),
    ("-march=x86-64-v3", {"avx2", "fma"}),
    ("-march=x86-64-v3 -mavxvnni", {"avx2", "fma", "avx_vnni"}),
    ("-march=x86-64", set()),
]


def _variant(flags: str, needs: set[str]) -> ctypes.CDLL:
    if flags != "-march=native" and not X86:
        pytest.skip("x86 variants")
    if not needs <= cpu_flags():
        pytest.skip(f"this CPU lacks {sorted(needs - cpu_flags())}")
    return build.load_variant(tuple(flags.split()))


def emulated_int8(x: torch.Tensor, qmax: int = 127) -> torch.Tensor:
    """What the kernels multiply: x quantized per 32 to integers within +-qmax (int8's
    127; the int16 product's 32767): amax / qmax, ties to even, the reciprocal
    multiplied; as float64."""
    m, k = x.shape
    xb = x.view(m, k // 32, 32)
    d = xb.abs().amax(-1, keepdim=True) / qmax
    q = torch.where(d > 0, torch.round(xb * (1 / d)), torch.zeros_like(xb)).clamp(-qmax, qmax)
    return (q * d).view(m, k).double()


def _qtensor(bits: int, n: int, k: int, seed: int, zero: bool = True) -> QTensor:
    g = torch.Generator().manual_seed(seed)
    if bits == 4:
        q = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    else:
        q = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    scale = torch.rand(n, k // 32, generator=g) * 0.05 + 0.001
    z = torch.randn(n, k // 32, generator=g) * 0.05 if zero or bits == 4 else None
    return QTensor(q, scale, z, 32, bits)


def _gemm(lib: ctypes.CDLL, x: torch.Tensor, w: nq.NativeMatrix) -> torch.Tensor:
    m, k = x.shape
    xa = torch.empty(int(lib.aug_acts_bytes(m, k)), dtype=torch.uint8)
    lib.aug_quantize_rows(x.data_ptr(), m, k, k, xa.data_ptr())
    y = torch.empty(m, w.n)
    lib.aug_gemm(w.data.data_ptr(), w.fmt, xa.data_ptr(), y.data_ptr(), m, w.n, k, w.n, None, 2)
    return y


def _compact(qt: QTensor) -> QTensor:
    """The same weight with GGUF-like scales: float16 values, offsets implied."""
    scale = qt.scale.half().float() if qt.scale is not None else None
    zero = None if qt.bits == 8 else torch.zeros_like(qt.scale)  # type: ignore[arg-type]
    return QTensor(qt.q, scale, zero, qt.group, qt.bits)


@pytest.mark.parametrize("flags,needs", VARIANTS, ids=[v[0] for v in VARIANTS])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("compact", [False, True], ids=["f32-offsets", "f16-implied"])
@pytest.mark.parametrize("grouped", [False, True], ids=["rows", "groups16"])
def test_integer_products_equal_the_reference_on_the_same_int8_activations(
    flags: str, needs: set[str], bits: int, compact: bool, grouped: bool
) -> None:
    """Every row count (tiles of 8, 4, 2, 1), an odd number of blocks (the 256-bit tail
    of the AVX-512 row kernel), every format (float32 scales with offsets; float16
    scales, offsets implied), rows and groups of 16: float32 rounding only (<1e-5)."""
    lib = _variant(flags, needs)
    for n, k in [(80, 96), (48, 576)] if grouped else [(70, 96), (33, 576)]:
        qt = _qtensor(bits, n, k, seed=n + bits, zero=bits == 4)
        qt = _compact(qt) if compact else qt
        w = nq.pack(qt, grouped=grouped)
        assert w.fmt & nq.FMT_F16 == (nq.FMT_F16 if compact else 0)
        assert bool(w.fmt & nq.FMT_M) == (bits == 4 and not compact)
        assert w.grouped == grouped
        for m in (1, 2, 3, 4, 8, 13, 17):
            x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
            want = emulated_int8(x) @ qt.dequantize().double().T
            err = ((_gemm(lib, x, w).double() - want).abs().max() / want.abs().max()).item()
            assert err < 1e-5, (flags, n, k, m, err)


@pytest.mark.parametrize("flags,needs", VARIANTS, ids=[v[0] for v in VARIANTS])
@pytest.mark.parametrize("grouped", [False, True], ids=["rows", "groups16"])
def test_q4_products_at_the_largest_integer_sums(
    flags: str, needs: set[str], grouped: bool
) -> None:
    """Every quant 15 against activations of one sign (all 127 once quantized): the
    largest block sums a q4 product can form, where a narrower integer sum would
    overflow; exact to float32 rounding, for each row count and both signs."""
    lib = _variant(flags, needs)
    n, k = 32, 256
    q = torch.full((n, k), 15, dtype=torch.uint8)
    q[n // 2 :] = torch.randint(0, 16, (n // 2, k), generator=torch.Generator().manual_seed(1),
                                dtype=torch.uint8)  # fmt: skip
    qt = QTensor(q, torch.full((n, k // 32), 0.01), torch.zeros(n, k // 32), 32, 4)
    w = nq.pack(qt, grouped=grouped)
    for m in (1, 2, 4, 8, 13):
        sign = torch.tensor([1.0 if r % 2 == 0 else -1.0 for r in range(m)])
        x = sign[:, None] * torch.full((m, k), 0.5)
        want = emulated_int8(x) @ qt.dequantize().double().T
        err = ((_gemm(lib, x, w).double() - want).abs().max() / want.abs().max()).item()
        assert err < 1e-5, (flags, m, err)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("grouped", [False, True], ids=["rows", "groups16"])
def test_packing_keeps_the_weight(bits: int, grouped: bool) -> None:
    """The block form dequantizes to the QTensor's weight (float32 rounding of d q + m),
    and to bf16 as torch rounds it, in rows and in groups of 16 (the same bytes, moved);
    per-channel int8 (one group of K) packs exactly."""
    qt = _qtensor(bits, 48, 128, seed=1)
    w = nq.pack(qt, grouped=grouped)
    assert w.kind == bits and w.nbytes == 48 * 4 * (24 if bits == 4 else 40)
    assert w.grouped == grouped
    rows = nq.pack(qt, grouped=False).data
    assert torch.equal(w.data.flatten().sort().values, rows.flatten().sort().values)
    torch.testing.assert_close(nq.dequantize(w), qt.dequantize(), rtol=0, atol=1e-6)
    torch.testing.assert_close(
        nq.dequantize(w, torch.bfloat16), nq.dequantize(w).to(torch.bfloat16), rtol=0, atol=0
    )
    if bits == 8:  # one scale a row (requantized GGUF types): each block repeats it;
        # stored as (q + 128) d + (m - 128 d), so float32 rounds at the scale of 256 d
        pc = QTensor(qt.q, torch.rand(48, 1) + 0.1, None, 128, 8)
        err = (nq.dequantize(nq.pack(pc)) - pc.dequantize()).abs() / pc.scale
        assert err.max().item() < 256 * 2**-22
    assert not nq.packable(QTensor(qt.q[:, :100], qt.scale[:, :1], None, 100, bits))
    with pytest.raises(ValueError, match="no native form"):
        nq.pack(QTensor(torch.zeros(4, 64), None, None, 0, 16))
    with pytest.raises(ValueError, match="multiple of 16"):
        nq.pack(_qtensor(bits, 40, 128, seed=1), grouped=True)
    assert not nq.pack(_qtensor(bits, 40, 128, seed=1)).grouped  # the default: rows


@pytest.mark.parametrize("flags,needs", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_grouped_weights_dequantize_alike_on_every_build(flags: str, needs: set[str]) -> None:
    """The AVX-512 and AVX2 transposes and the plain C reading of the group layout agree with the
    row layout's dequantization, bit for bit (float32 and bf16), every format."""
    lib = _variant(flags, needs)
    for bits, zero, k in [(4, True, 96), (8, False, 64), (8, True, 160)]:
        qt = _qtensor(bits, 32, k, seed=bits + k, zero=zero)
        for compact in (False, True):
            q = _compact(qt) if compact else qt
            rows, groups = nq.pack(q, grouped=False), nq.pack(q, grouped=True)
            for kind, dtype in ((0, torch.float32), (1, torch.bfloat16)):
                a, b = torch.empty(32, k, dtype=dtype), torch.empty(32, k, dtype=dtype)
                lib.aug_dequant(rows.data.data_ptr(), rows.fmt, 32, k, a.data_ptr(), kind, 2)
                lib.aug_dequant(groups.data.data_ptr(), groups.fmt, 32, k, b.data_ptr(), kind, 2)
                assert torch.equal(a, b), (flags, bits, zero, compact, dtype)


GGUF_TYPES = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q8_0]
# bytes a block of 32 in the native form: the file's own size where its scales are
# float16 (Q5_0 is requantized to int8 per channel: float32 scale, no offset)
BLOCK_BYTES = {Q.Q4_0: 18, Q.Q4_1: 20, Q.Q5_0: 36, Q.Q8_0: 34}


@pytest.mark.parametrize("qtype", GGUF_TYPES, ids=lambda q: q.name)
def test_quant_linear_on_native_kernels_per_gguf_type(qtype: Q) -> None:
    """bf16 activations go to the native kernels; against the file's own dequantization
    (the `gguf` package's) the only error is the activations' int8 rounding (< 2%), and
    the same call on the emulated int8 activations is exact to float32 rounding."""
    n, k = 64, 256
    w = np.random.default_rng(3).standard_normal((n, k)).astype(np.float32) / k**0.5
    raw = np.asarray(gguf.quants.quantize(w, qtype)).reshape(-1)
    ref = torch.from_numpy(gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(n, k))
    layer = QuantLinear(k, n, False, torch.bfloat16)
    layer.set_weight(qtensor_from_gguf(raw, int(qtype), (n, k)))
    assert layer.native is not None and layer.packed is None
    assert layer.native.nbytes == n * k // 32 * BLOCK_BYTES[qtype]
    x = torch.randn(6, k, generator=torch.Generator().manual_seed(5))
    got = nq.matmul(x, layer.native).double()
    want = emulated_int8(x) @ nq.dequantize(layer.native).double().T
    assert ((got - want).abs().max() / want.abs().max()).item() < 1e-5
    full = x.double() @ ref.double().T
    assert ((got - full).abs().max() / full.abs().max()).item() < 2e-2
    out = layer(x.to(torch.bfloat16))
    assert out.dtype == torch.bfloat16 and out.shape == (6, n)


@pytest.mark.parametrize("grouped", [False, True], ids=["rows", "groups16"])
def test_prefill_sized_products_use_the_dequantized_weight(
    grouped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From NATIVE_DENSE_ROWS rows on the block form (rows or groups of 16) is
    dequantized and multiplied densely; below it the integer kernel runs: both agree
    with the reference within bf16 and int8 rounding."""
    from augserve.engine import quant

    monkeypatch.setattr(nq, "wide_by_default", lambda: False)  # AVX2's int16 product: its own test
    rows = quant.NATIVE_DENSE_ROWS
    qt = _qtensor(4, 64, 128, seed=9)
    layer = QuantLinear(128, 64, False, torch.bfloat16)
    layer.set_weight(qt)
    layer.native = nq.pack(qt, grouped=grouped)
    dense = []
    real = nq.dequantize
    monkeypatch.setattr(nq, "dequantize", lambda *a, **k: dense.append(1) or real(*a, **k))
    x = torch.randn(rows + 5, 128, generator=torch.Generator().manual_seed(1))
    want = x.double() @ qt.dequantize().double().T
    big = layer(x.to(torch.bfloat16)).double()
    assert len(dense) == 1
    small = torch.cat([layer(x[i : i + rows - 1].to(torch.bfloat16))
                       for i in range(0, len(x), rows - 1)])  # fmt: skip
    assert len(dense) == 1  # below the threshold: the integer kernel
    for got in (big, small.double()):
        assert ((got - want).abs().max() / want.abs().max()).item() < 3e-2


# (heads, KV heads, head size): the AVX-512 kernel's head sizes 32 / 64 / 128 with 2, 4,
# 7 and 8 query heads a KV head (every accumulator grouping; 7 as 4 + 2 + 1), and a size
# only the plain-C chunk kernel takes
SHAPES = [(8, 2, 64), (8, 4, 32), (16, 2, 128), (16, 2, 32), (14, 2, 64), (6, 3, 24)]


@pytest.mark.parametrize("flags,needs", VARIANTS, ids=[v[0] for v in VARIANTS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "h{}-kv{}-d{}".format(*s))
def test_paged_decode_attention_matches_torch(
    dtype: torch.dtype, flags: str, needs: set[str], shape: tuple[int, int, int]
) -> None:
    """Sequences of 1 to 700 tokens (chunks of one, and of several: the flash-decoding
    merge; tiles of 16 tokens and their tails), scattered blocks, GQA, every ISA
    variant: torch's gather-then-SDPA on the same cache."""
    lib = _variant(flags, needs)
    g = torch.Generator().manual_seed(0)
    (heads, kv_heads, d), bs = shape, 16
    lens = torch.tensor([1, 17, 700, 129, 256])
    nb = int((lens.max() + bs - 1) // bs)
    perm = torch.randperm(len(lens) * nb + 3, generator=g)[: len(lens) * nb]
    tables = perm.view(len(lens), nb).long().contiguous()
    kc = torch.randn(len(lens) * nb + 3, bs, kv_heads, d, generator=g).to(dtype)
    vc = torch.randn(kc.shape, generator=g).to(dtype)
    q = torch.randn(len(lens), heads, d, generator=g)
    want = decode_reference(q.double(), kc.double(), vc.double(), tables, lens, 0.125)
    for threads in (1, 2):
        out = torch.empty_like(q)
        kind = 0 if dtype == torch.float32 else 1
        lib.aug_attn_decode(q.data_ptr(), kc.data_ptr(), vc.data_ptr(), kind, tables.data_ptr(),
                            nb, lens.data_ptr(), out.data_ptr(), len(lens), heads, kv_heads, d,
                            bs, 0.125, threads)  # fmt: skip
        assert (out.double() - want).abs().max().item() < 1e-5


def _runner(model: str, dtype: str | None, quantize: bool) -> ModelRunner:
    kv = KVCacheConfig(block_size=8, num_device_blocks=96)
    cfg = RunnerConfig(model, dtype, "cpu", kv, compile=False, prepack=False, quantize=quantize)
    return ModelRunner(cfg)


def _decode_logits(r: ModelRunner, prompts: list[list[int]], steps: int,
                   first: int = 0) -> list[torch.Tensor]:  # fmt: skip
    """Teacher-forced: each prompt prefilled, then `steps` decode steps of all of them
    together (token t of step s: a fixed function of s and the prompt's index, counted
    from `first`), the logits of every step."""
    idx = range(first, first + len(prompts))
    tables = [list(range(90 - 12 * i, 90 - 12 * i - 12, -1)) for i in idx]
    for i, p in zip(idx, prompts, strict=True):
        r.forward_logits([SeqChunk(f"s{i}", p, 0, tables[i - first], True)])
    pos = [len(p) for p in prompts]
    out = []
    for s in range(steps):
        chunks = [SeqChunk(f"s{i}", [(7 * s + 3 * i) % 500 + 1], pos[i - first], tables[i - first],
                           True) for i in idx]  # fmt: skip
        out.append(r.forward_logits(chunks))
        pos = [p + 1 for p in pos]
    return out


@pytest.mark.parametrize(
    "arch,qtype",
    [("llama", Q.Q4_0), ("llama", Q.Q8_0), ("qwen2", Q.Q4_1)],
    ids=["llama-Q4_0", "llama-Q8_0", "qwen2-Q4_1"],
)
def test_fused_decode_step_matches_the_dequantized_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arch: str, qtype: Q
) -> None:
    """Three sequences of different lengths decoding together through every layer in one
    native call (scattered blocks, GQA, Qwen2's QKV bias): the logits of every step are
    the float32 dequantized model's up to the activations' int8 rounding, and the
    native call is what ran (the torch path would have dispatched per layer)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    d = make_model(arch, "tiny", tmp_path / "m", seed=4, untied=arch == "llama")
    model = resolve_model(write_gguf(d, tmp_path / "m.gguf", qtype=qtype, arch=arch))
    ref, got = _runner(model, "fp32", False), _runner(model, None, True)
    assert got.native is not None and ref.native is None
    calls = []
    real = got.native.decode
    monkeypatch.setattr(got.native, "decode", lambda *a: calls.append(1) or real(*a))
    prompts = [list(range(5, 25)), [300, 301, 7], list(range(100, 141))]
    want, have = _decode_logits(ref, prompts, 6), _decode_logits(got, prompts, 6)
    assert len(calls) == 6
    for w, h in zip(want, have, strict=True):
        rel = ((h - w).abs().max() / w.abs().max()).item()
        cos = torch.nn.functional.cosine_similarity(h.double(), w.double(), dim=-1)
        assert rel < 0.05 and cos.min().item() > 0.998, (rel, cos)


def test_fused_decode_rows_are_independent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The steps between a layer's products share the batch's rows among the threads
    (decode.c): five sequences decoding together give every row's logits bit for bit as
    that sequence decoding alone (no row read or written by another's thread)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    torch.set_num_threads(2)
    d = make_model("qwen2", "tiny", tmp_path / "m", seed=6)
    model = resolve_model(write_gguf(d, tmp_path / "m.gguf", qtype=Q.Q4_0, arch="qwen2"))
    r = _runner(model, None, True)
    assert r.native is not None
    prompts = [list(range(5, 25)), [300, 301, 7], list(range(100, 141)), [9] * 11, [44, 45]]
    together = _decode_logits(r, prompts, 4)
    for i, p in enumerate(prompts):
        alone = _decode_logits(r, [p], 4, first=i)
        for s in range(4):
            assert torch.equal(together[s][i], alone[s][0]), (i, s)


def test_build_is_cached_and_failures_fall_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A second load reuses the built file; a compiler that fails or is missing makes the
    kernels unavailable with the reason logged (torch's run), or an error when
    AUGSERVE_NATIVE=1; AUGSERVE_NATIVE=0 turns them off without building."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cc = build.compiler()
    assert cc is not None
    path = build.build(cc, ("-march=x86-64",) if X86 else ())
    mtime = path.stat().st_mtime_ns
    assert build.build(cc, ("-march=x86-64",) if X86 else ()) == path
    assert path.stat().st_mtime_ns == mtime and path.parent == tmp_path / "xdg/augserve/native"
    bad = tmp_path / "cc"
    bad.write_text("#!/bin/sh\necho 'cc: fatal error: broken' >&2\nexit 1\n")
    bad.chmod(0o755)
    monkeypatch.setenv("CC", str(bad))
    for fn in (build.load, build.load_variant, build.available):
        fn.cache_clear()
    try:
        assert not build.available()
        assert "broken" in caplog.text
        build.available.cache_clear()
        monkeypatch.setenv("AUGSERVE_NATIVE", "1")
        with pytest.raises(build.NativeUnavailable, match="broken"):
            build.available()
        build.available.cache_clear()
        build.load.cache_clear()
        monkeypatch.setenv("AUGSERVE_NATIVE", "0")
        with pytest.raises(build.NativeUnavailable, match="AUGSERVE_NATIVE=0"):
            build.load()
        assert not build.available()
    finally:
        for fn in (build.load, build.load_variant, build.available):
            fn.cache_clear()


def test_dense_products_reuse_one_buffer_per_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefill-sized products dequantize into this thread's buffer, kept between calls
    (fresh pages cost the server 0.34 s of a 0.5B prefill); a weight over SCRATCH_BYTES
    gets its own tensor; every result is the weight's."""
    a, b = nq.pack(_qtensor(4, 64, 128, seed=1)), nq.pack(_qtensor(8, 32, 256, seed=2))
    wa = nq.dequantize(a, torch.bfloat16, reuse=True)
    torch.testing.assert_close(wa, nq.dequantize(a, torch.bfloat16), rtol=0, atol=0)
    wb = nq.dequantize(b, torch.bfloat16, reuse=True)
    assert wb.untyped_storage().data_ptr() == wa.untyped_storage().data_ptr()
    torch.testing.assert_close(wb, nq.dequantize(b, torch.bfloat16), rtol=0, atol=0)
    monkeypatch.setattr(nq, "SCRATCH_BYTES", 1024)
    wc = nq.dequantize(a, torch.bfloat16, reuse=True)
    assert wc.untyped_storage().data_ptr() != wa.untyped_storage().data_ptr()


def test_the_builds_isa_is_asked_once_per_loaded_library() -> None:
    """Prefill asks `isa()` per product (the AVX2 routing); the library answers once."""
    calls: list[int] = []

    def aug_isa() -> bytes:
        calls.append(1)
        return b"avx2"

    class Lib:  # a loaded library's stand-in: its functions are attributes
        pass

    lib = Lib()
    lib.aug_isa = aug_isa  # type: ignore[attr-defined]
    assert [build.isa_of(lib), build.isa_of(lib)] == ["avx2", "avx2"]  # type: ignore[arg-type]
    assert len(calls) == 1
    if build.available():
        assert build.isa() == build.isa_of(build.load())
