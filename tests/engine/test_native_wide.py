"""Grouped weights times int16 activations (native/gemm16w.c), the prefill-sized product
on AVX2 builds: against a dequantize-then-matmul reference on the same int16 activations
on every build this CPU runs, its precision against bf16's, and when QuantLinear uses it."""

from __future__ import annotations

import ctypes

import pytest
import torch

from augserve.engine.native import build
from augserve.engine.native import qmatrix as nq
from augserve.engine.quant import NATIVE_DENSE_ROWS, QuantLinear
from tests.engine.test_native import VARIANTS, _compact, _qtensor, _variant, emulated_int8

pytestmark = pytest.mark.skipif(
    build.compiler() is None, reason="no C compiler: the native kernels cannot be built"
)


def emulated_int16(x: torch.Tensor) -> torch.Tensor:
    """What the kernel multiplies: x quantized to int16 per 32, as float64."""
    return emulated_int8(x, 32767)


def _wide(lib: ctypes.CDLL, x: torch.Tensor, w: nq.NativeMatrix,
          bias: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    m, k = x.shape
    work = torch.empty(int(lib.aug_acts16_bytes(m, k)), dtype=torch.uint8)
    y = torch.empty(m, w.n)
    bp = None if bias is None else bias.data_ptr()
    lib.aug_gemm16_wide(w.data.data_ptr(), w.fmt, x.data_ptr(), work.data_ptr(), y.data_ptr(),
                        m, w.n, k, w.n, bp, 2)  # fmt: skip
    return y


@pytest.mark.parametrize("flags,needs", VARIANTS, ids=[v[0] for v in VARIANTS])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("compact", [False, True], ids=["f32-offsets", "f16-implied"])
def test_wide_products_equal_the_reference_on_the_same_int16_activations(
    flags: str, needs: set[str], bits: int, compact: bool
) -> None:
    """Every row count (tiles of 3, 2, 1), every format (float32 scales with offsets,
    float16 scales with the offset implied), q4 and q8, with and without a bias, an
    all-zero row: float32 rounding only."""
    lib = _variant(flags, needs)
    for n, k in [(48, 96), (32, 576)]:
        qt = _qtensor(bits, n, k, seed=n + bits, zero=bits == 4)
        qt = _compact(qt) if compact else qt
        w = nq.pack(qt, grouped=True)
        bias = torch.randn(n, generator=torch.Generator().manual_seed(3))
        for m in (1, 2, 3, 4, 5, 7, 26):
            x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
            if m > 2:
                x[m // 2] = 0.0
            want = emulated_int16(x) @ qt.dequantize().double().T
            for b in (None, bias):
                got = _wide(lib, x, w, b).double() - (0 if b is None else b.double())
                err = ((got - want).abs().max() / want.abs().max()).item()
                assert err < 1e-5, (flags, n, k, m, b is None, err)
            if m > 2:
                assert torch.equal(_wide(lib, x, w)[m // 2], torch.zeros(n))


def test_finer_than_the_bf16_product_it_stands_in_for() -> None:
    """Against the exact product of the float activations, with outlier columns that
    widen every block's range 30x, the int16 product's error is under a third of a bf16
    dense product's (the precision of prefill on bf16 CPUs) and a fiftieth of the int8
    product's (which broke a prefill's greedy answer, quant.NATIVE_DENSE_ROWS)."""
    qt = _qtensor(4, 64, 896, seed=5)
    w = nq.pack(qt, grouped=True)
    x = torch.randn(40, 896, generator=torch.Generator().manual_seed(7))
    x[:, ::17] *= 30  # outliers, as activations have
    exact = x.double() @ qt.dequantize().double().T
    scale = exact.abs().max()
    wide = ((nq.matmul_wide(x, w).double() - exact).abs().max() / scale).item()
    bf16 = (x.bfloat16() @ qt.dequantize().bfloat16().T).double()
    dense = ((bf16 - exact).abs().max() / scale).item()
    int8 = ((nq.matmul(x, w).double() - exact).abs().max() / scale).item()
    assert wide < dense / 3 and wide < int8 / 50 and wide < 1e-4, (wide, dense, int8)


def test_refuses_weights_in_rows_and_wrong_widths() -> None:
    rows = nq.pack(_qtensor(4, 32, 64, seed=1), grouped=False)
    with pytest.raises(ValueError, match="grouped by 16"):
        nq.matmul_wide(torch.randn(30, 64), rows)
    groups = nq.pack(_qtensor(4, 32, 64, seed=1), grouped=True)
    with pytest.raises(ValueError, match="columns"):
        nq.matmul_wide(torch.randn(30, 96), groups)


@pytest.mark.parametrize("wide", [False, True], ids=["dense", "wide"])
def test_prefill_sized_products_on_grouped_weights_take_the_wide_product_where_chosen(
    wide: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `wide_by_default` (AVX2 builds) a grouped weight's product of NATIVE_DENSE_ROWS
    rows or more runs `matmul_wide` and dequantizes nothing; a weight in rows, and every
    weight where it is off, is dequantized and multiplied densely; the result is the
    weight's either way."""
    monkeypatch.setattr(nq, "wide_by_default", lambda: wide)
    calls: list[str] = []
    for name in ("dequantize", "matmul_wide"):
        real = getattr(nq, name)
        spy = lambda *a, _r=real, _n=name, **k: calls.append(_n) or _r(*a, **k)  # noqa: E731
        monkeypatch.setattr(nq, name, spy)
    qt = _qtensor(4, 64, 128, seed=9)
    x = torch.randn(NATIVE_DENSE_ROWS + 5, 128, generator=torch.Generator().manual_seed(1))
    want = x.double() @ qt.dequantize().double().T
    for grouped in (True, False):
        layer = QuantLinear(128, 64, False, torch.float32)
        layer.set_weight(qt)
        layer.native = nq.pack(qt, grouped=grouped)
        calls.clear()
        got = layer(x).double()
        taken = "matmul_wide" if wide and grouped else "dequantize"
        assert calls == [taken], (grouped, calls)
        bound = 1e-4 if taken == "matmul_wide" else 3e-2  # the dense product may be bf16
        assert ((got - want).abs().max() / want.abs().max()).item() < bound
