"""GGUF weights kept quantized (engine/quant.py, engine/gguf_quant.py): per GGUF type,
QuantLinear against a dequantize-then-matmul reference (the `gguf` package's own
dequantization); the exact types are exact; a GGUF model loaded quantized generates
what its dequantized fp32 load generates."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q

from augserve.engine.gguf_loader import GGUFWeights
from augserve.engine.gguf_quant import EXACT_INT4, EXACT_INT8, qtensor_from_gguf
from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner
from augserve.engine.quant import QTensor, QuantLinear, cat_rows, int8_planes, quantize_int8
from augserve.engine.quant_embed import QuantEmbedding
from augserve.engine.resolve import resolve_model
from augserve.engine.runner_config import RunnerConfig
from tests.engine.gguf_helpers import write_gguf
from tests.engine.helpers import run_greedy

N, K = 96, 512  # K: two 256-value super-blocks per row
QUANTIZABLE = (Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0)  # the gguf package quantizes these
K_QUANTS = (Q.Q4_K, Q.Q5_K, Q.Q6_K)  # these it only dequantizes: random blocks here
# (offset, count) of each block's fp16 scale fields: random bytes there could be inf/NaN
FP16_FIELDS = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208, 1)}


def _weight(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((N, K)).astype(np.float32) / K**0.5


def _random_k_blocks(qtype: Q, seed: int) -> np.ndarray:
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (N * K // block, size), dtype=np.uint8)
    at, count = FP16_FIELDS[qtype]
    d = rng.uniform(1e-3, 5e-3, (blocks.shape[0], count)).astype(np.float16)
    blocks[:, at : at + 2 * count] = d.view(np.uint8)
    return blocks.reshape(-1)


def _raw(qtype: Q, seed: int = 0) -> np.ndarray:
    if qtype in K_QUANTS:
        return _random_k_blocks(qtype, seed)
    return np.asarray(gguf.quants.quantize(_weight(seed), qtype)).reshape(-1)


def _reference(raw: np.ndarray, qtype: Q) -> torch.Tensor:
    w = gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(N, K)
    return torch.from_numpy(np.ascontiguousarray(w))


def _linear(raw: np.ndarray, qtype: Q, act: torch.dtype) -> QuantLinear:
    layer = QuantLinear(K, N, False, act)
    layer.set_weight(qtensor_from_gguf(raw, int(qtype), (N, K)))
    return layer


@pytest.mark.parametrize("qtype", QUANTIZABLE + K_QUANTS, ids=lambda q: q.name)
def test_quant_linear_matches_dequantize_then_matmul(qtype: Q) -> None:
    raw = _raw(qtype)
    w = _reference(raw, qtype)
    x = torch.randn(5, K, generator=torch.Generator().manual_seed(1))
    want = x @ w.T
    qt = qtensor_from_gguf(raw, int(qtype), (N, K))
    got = _linear(raw, qtype, torch.float32)(x)
    err = (got - want).abs().max().item() / want.abs().max().item()
    if int(qtype) in EXACT_INT4 + EXACT_INT8:
        assert (qt.bits, qt.group) == (4 if int(qtype) in EXACT_INT4 else 8, 32)
        assert torch.allclose(qt.dequantize(), w, rtol=1e-6, atol=1e-7)  # exact but rounding
        assert err < 1e-5, err
    else:  # requantized to int8 per channel: within half a step of each row's scale
        assert qt.bits == 8
        step = w.abs().amax(dim=1, keepdim=True) / 127
        assert bool(((qt.dequantize() - w).abs() <= step / 2 * (1 + 1e-5)).all())
        assert 1e-7 < err < 2e-2, err
    bf16 = _linear(raw, qtype, torch.bfloat16)(x.bfloat16()).float()
    assert (bf16 - want).abs().max().item() / want.abs().max().item() < 3e-2


def test_int8_requantization_error_is_half_a_step() -> None:
    w = torch.from_numpy(_weight(5))
    qt = quantize_int8(w)
    step = w.abs().amax(dim=1, keepdim=True) / 127
    assert bool(((qt.dequantize() - w).abs() <= step / 2 * (1 + 1e-5)).all())


def test_int8_in_groups_is_two_int4_planes_exactly() -> None:
    """q s + z == the sum of the planes, for every int8 value (-128..127) and a zero;
    the linear layer on it (2 planes stacked) equals dequantize-then-matmul; int4 and
    int8 parts of one fused projection meet in int8 groups, exactly."""
    g = torch.Generator().manual_seed(4)
    q = torch.arange(-128, 128, dtype=torch.int16).repeat(N, 2)[:, :K].to(torch.int8)
    scale, zero = torch.rand(N, K // 32, generator=g) + 0.1, torch.randn(N, K // 32, generator=g)
    qt = QTensor(q, scale, zero, 32, 8)
    hi, lo = int8_planes(qt)
    assert (hi.bits, lo.bits) == (4, 4) and int(hi.q.max()) <= 15 and int(lo.q.max()) <= 15
    torch.testing.assert_close(hi.dequantize() + lo.dequantize(), qt.dequantize())
    layer = QuantLinear(K, N, False, torch.float32)
    layer.set_weight(QTensor(q, scale, None, 32, 8))
    assert layer.planes == 2 and layer.bits == 4
    x = torch.randn(3, K, generator=g)
    want = x @ QTensor(q, scale, None, 32, 8).dequantize().T
    assert ((layer(x) - want).abs().max() / want.abs().max()).item() < 1e-6  # fp32 rounding
    int4 = qtensor_from_gguf(_raw(Q.Q4_1), int(Q.Q4_1), (N, K))
    mixed = cat_rows([int4, QTensor(q, scale, None, 32, 8)])
    assert (mixed.bits, mixed.group) == (8, 32)
    want_w = torch.cat([int4.dequantize(), QTensor(q, scale, None, 32, 8).dequantize()])
    torch.testing.assert_close(mixed.dequantize(), want_w)


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0], ids=lambda q: q.name)
def test_quant_embedding_rows_are_the_files_rows(qtype: Q) -> None:
    raw = _raw(qtype, seed=2)
    emb = QuantEmbedding(N, K, torch.float32)
    emb.set_raw(raw, int(qtype))
    ids = torch.tensor([[3, 0, 95], [7, 7, 1]])
    assert torch.equal(emb(ids), _reference(raw, qtype)[ids])


@pytest.mark.parametrize("grouped", [False, True], ids=["rows", "groups16"])
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q4_1], ids=lambda q: q.name)
def test_a_tied_table_is_read_from_the_heads_native_weight(qtype: Q, grouped: bool) -> None:
    """A table tied to the LM head is dropped for the head's native weight where that
    holds the file's values (Q4_0, Q8_0; rows or groups of 16): the same rows, exactly;
    Q4_1 (stored offsets), another tensor's weight, or no native weight: kept."""
    from augserve.engine.native import build
    from augserve.engine.native import qmatrix as nq

    if build.compiler() is None:
        pytest.skip("no C compiler: the native kernels cannot be built")
    raw = _raw(qtype, seed=2)
    head = nq.pack(qtensor_from_gguf(raw, int(qtype), (N, K)), grouped=grouped)
    emb = QuantEmbedding(N, K, torch.float32)
    emb.set_raw(raw, int(qtype))
    other = nq.pack(qtensor_from_gguf(_raw(qtype, seed=3), int(qtype), (N, K)), grouped=grouped)
    assert not emb.share(other) and not emb.share(None) and emb.raw is not None
    shared = emb.share(head)
    assert shared == (qtype != Q.Q4_1) and emb.loaded
    assert (emb.raw is None) == shared and emb.weight_bytes() == (0 if shared else raw.size)
    ids = torch.tensor([[3, 0, 95], [7, 7, 1]])
    assert torch.equal(emb(ids), _reference(raw, qtype)[ids])
    with pytest.raises(IndexError):
        nq.rows(head, torch.tensor([N]))


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("q") / "m", seed=3, untied=True)


def _runner(model: str, dtype: str, quantize: bool) -> ModelRunner:
    kv = KVCacheConfig(block_size=8, num_device_blocks=64)
    cfg = RunnerConfig(model, dtype, "cpu", kv, compile=False, prepack=False, quantize=quantize)
    return ModelRunner(cfg)


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q8_0], ids=lambda q: q.name)
def test_gguf_model_quantized_generates_as_dequantized(
    llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtype: Q
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    model = resolve_model(write_gguf(llama_dir, tmp_path / "m.gguf", qtype=qtype))
    ref, got = _runner(model, "fp32", False), _runner(model, "fp32", True)
    assert got.quantized and not ref.quantized
    layers = [m for m in got.model.modules() if isinstance(m, QuantLinear)]
    assert len(layers) == 2 * 4 + 1  # qkv, o, gate_up, down in each of 2 layers; LM head
    assert {m.bits for m in layers} == {4}  # Q8_0: int8 groups as two int4 planes
    assert {m.planes for m in layers} == {1 if qtype in (Q.Q4_0, Q.Q4_1) else 2}
    prompts = [[5, 17, 42, 99, 7], [300, 301], list(range(40, 70))]
    assert run_greedy(got, prompts, 12) == run_greedy(ref, prompts, 12)


def test_auto_dtype_keeps_gguf_quantized_where_the_native_kernels_build(
    llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No dtype: a GGUF file stays quantized on the native kernels (quant_select.py);
    AUGSERVE_QUANT=0 dequantizes it; without the native kernels it is opt-in
    (AUGSERVE_QUANT=1, torch's kernels); an explicit dtype or an HF directory is never
    quantized, and asking for it there is an error."""
    from augserve.engine.native import build

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("AUGSERVE_QUANT", raising=False)
    monkeypatch.setattr("augserve.engine.quant_select.cpu_has_bf16", lambda: True)
    model = resolve_model(write_gguf(llama_dir, tmp_path / "m.gguf", qtype=Q.Q4_0))
    kv = KVCacheConfig(block_size=8, num_device_blocks=16)

    def runner(m: str, dtype: str | None = None, **kw: bool) -> ModelRunner:
        return ModelRunner(RunnerConfig(m, dtype, "cpu", kv, compile=False, **kw))

    auto = runner(model)
    assert auto.quantized and auto.dtype == torch.bfloat16 and auto.native is not None
    assert not runner(model, "bf16").quantized
    assert not runner(str(llama_dir)).quantized
    monkeypatch.setenv("AUGSERVE_QUANT", "0")
    assert not runner(model).quantized
    monkeypatch.setenv("AUGSERVE_NATIVE", "0")
    for fn in (build.load, build.available):
        fn.cache_clear()
    try:
        monkeypatch.delenv("AUGSERVE_QUANT")
        assert not runner(model).quantized  # opt-in on torch's kernels
        monkeypatch.setenv("AUGSERVE_QUANT", "1")
        on = runner(model)
        assert on.quantized and on.native is None
    finally:
        monkeypatch.delenv("AUGSERVE_NATIVE")
        for fn in (build.load, build.available):
            fn.cache_clear()
    with pytest.raises(ValueError, match="quantize"):
        runner(str(llama_dir), quantize=True)


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q8_0], ids=lambda q: q.name)
def test_a_tied_gguf_model_holds_its_table_once_and_generates_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtype: Q
) -> None:
    """A tied model's table is read from the LM head's native weight (held once), and
    generates what the same model holding both generates."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr("augserve.engine.quant_select.cpu_has_bf16", lambda: True)
    over = {"tie_word_embeddings": True}  # as Qwen2-0.5B and SmolLM2
    tied = make_model("llama", "tiny", tmp_path / "tied", seed=5, overrides=over)
    model = resolve_model(write_gguf(tied, tmp_path / "t.gguf", qtype=qtype))
    kv = KVCacheConfig(block_size=8, num_device_blocks=64)
    got = ModelRunner(RunnerConfig(model, None, "cpu", kv, compile=False))
    if got.native is None:
        pytest.skip("the native kernels are not used here")
    emb = got.model.embed_tokens
    assert isinstance(emb, QuantEmbedding) and emb.shared is not None and emb.raw is None
    monkeypatch.setattr(QuantEmbedding, "share", lambda self, head: False)
    ref = ModelRunner(RunnerConfig(model, None, "cpu", kv, compile=False))
    assert ref.model.embed_tokens.raw is not None
    prompts = [[5, 17, 42, 99, 7], [300, 301], list(range(40, 70))]
    assert run_greedy(got, prompts, 12) == run_greedy(ref, prompts, 12)


def test_get_quant_undoes_the_qk_permutation(
    llama_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = write_gguf(llama_dir, tmp_path / "m.gguf", qtype=Q.Q4_0)
    src = GGUFWeights(f, progress=False)
    for name in (
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.self_attn.k_proj.weight",
    ):
        assert torch.allclose(src.get_quant(name).dequantize(), src.get(name), atol=1e-6)


def _count_decode_ops(r: ModelRunner) -> Counter[str]:
    """The ops one batch-1 decode step dispatches, counted at torch's dispatcher."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from augserve.engine.model_runner import SeqChunk
    from augserve.engine.sampling_params import SamplingParams

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: Counter[str] = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.ops[str(func.overloadpacket)] += 1
            return func(*args, **(kwargs or {}))

    greedy = SamplingParams(temperature=0.0)
    r.execute([SeqChunk("a", list(range(10, 30)), 0, [0, 1, 2, 3], True, greedy)])
    with Count() as c:
        r.execute([SeqChunk("a", [5], 20, [0, 1, 2, 3], True, greedy)])
    return c.ops


def test_quantized_decode_step_dispatches_few_ops(
    llama_dir: Path, tmp_path: Path, torch_kernels: None
) -> None:
    """torch's kernels (AUGSERVE_NATIVE=0): a batch-1 decode step's ops per layer at
    most 52 (what costs microseconds each at decode sizes, docs/engine-quant.md; the
    quantized SmolLM2 path dispatched 90 a layer before: no-op casts, reshapes,
    advanced-index gathers, a mask and SDPA for one query, rotary of q and k apart)."""
    model = resolve_model(write_gguf(llama_dir, tmp_path / "m.gguf", qtype=Q.Q4_0))
    r = _runner(model, "bf16", True)
    assert r.native is None
    ops, layers = _count_decode_ops(r), r.model.num_layers
    assert ops["aten._weight_int4pack_mm_for_cpu"] == 4 * layers + 1  # + the LM head
    assert ops["aten.index_select"] == 2 * layers + 4  # K, V; embedding, cos, sin, sampled row
    assert ops["aten.scaled_dot_product_attention"] == 0 and ops["aten.index"] == 0
    assert sum(ops.values()) <= 52 * layers + 60, ops  # + embedding, sampling, rotary


def test_native_decode_step_dispatches_no_op_per_layer(llama_dir: Path, tmp_path: Path) -> None:
    """The native kernels: every layer of a decode step runs in one call (native/
    decoder.py), so the step dispatches only the embedding lookup, a cast and the
    sampler's ops, however many layers (the torch path: ~50 a layer)."""
    model = resolve_model(write_gguf(llama_dir, tmp_path / "m.gguf", qtype=Q.Q4_0))
    r = _runner(model, "bf16", True)
    assert r.native is not None
    ops = _count_decode_ops(r)
    assert ops["aten._weight_int4pack_mm_for_cpu"] == 0 and ops["aten.index_select"] <= 3, ops
    assert sum(ops.values()) <= 60, ops  # the step's index tensors, embedding, sampler


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q8_0], ids=lambda q: q.name)
def test_prefill_sized_products_run_on_the_dequantized_weight(qtype: Q) -> None:
    """From DEQUANT_ROWS rows on, the packed int4 weight is rebuilt (torch's packing read
    right: a probe) and multiplied densely; the result is the dequantize-then-matmul
    reference's, as the int4 kernel's is for fewer rows."""
    from augserve.engine.quant_prefill import DEQUANT_ROWS, layout_ok, use_dequantized

    n, k = 128, 512
    w = np.random.default_rng(7).standard_normal((n, k)).astype(np.float32) / k**0.5
    raw = np.asarray(gguf.quants.quantize(w, qtype)).reshape(-1)
    ref_w = torch.from_numpy(gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(n, k))
    layer = QuantLinear(k, n, False, torch.float32)
    layer.set_weight(qtensor_from_gguf(raw, int(qtype), (n, k)))
    # torch packs int4 by the CPU's capability (blocks of 64 rows with AVX-512, 32 with
    # AVX2 only): where the probe does not read its layout, every product runs on the int4
    # kernel, and the results must match the reference all the same
    rows = layer.packed.shape[0]  # type: ignore[union-attr]
    assert use_dequantized(DEQUANT_ROWS, rows) is layout_ok()
    assert not use_dequantized(DEQUANT_ROWS - 1, n)
    x = torch.randn(DEQUANT_ROWS + 3, k, generator=torch.Generator().manual_seed(2))
    want = x @ ref_w.T
    big, small = layer(x), torch.cat([layer(x[i : i + 8]) for i in range(0, len(x), 8)])
    for got in (big, small):
        assert ((got - want).abs().max() / want.abs().max()).item() < 1e-5
