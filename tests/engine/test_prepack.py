"""Linear layers on oneDNN-prepacked weights (engine/prepack.py): same numbers as
F.linear, never a stale or foreign packed copy, and the switch's rules."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn.functional as F

from augserve.engine import prepack
from augserve.engine.prepack import Linear, is_packed, pack_weight, packed_linear

pytestmark = pytest.mark.skipif(not prepack.prepack_available(), reason="no oneDNN in this torch")


def _weight(out: int = 48, inp: int = 32, seed: int = 0) -> torch.nn.Parameter:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.Parameter(torch.randn(out, inp, generator=g), requires_grad=False)


@pytest.mark.parametrize("shape", [(1, 32), (16, 32), (3, 5, 32)])
def test_packed_linear_equals_f_linear(shape: tuple[int, ...]) -> None:
    w, b = _weight(), torch.randn(48)
    pack_weight(w)
    assert is_packed(w)
    x = torch.randn(shape)
    out = packed_linear(x, w, b)
    assert out.shape == (*shape[:-1], 48)
    torch.testing.assert_close(out, F.linear(x, w, b), atol=1e-5, rtol=1e-5)


def test_weight_changed_in_place_is_not_served_stale() -> None:
    w = _weight()
    pack_weight(w)
    x = torch.randn(4, 32)
    with torch.no_grad():
        w.mul_(2.0)
    assert not is_packed(w)
    torch.testing.assert_close(packed_linear(x, w, None), F.linear(x, w))
    pack_weight(w)  # packing again picks the new values up
    assert is_packed(w)
    torch.testing.assert_close(packed_linear(x, w, None), F.linear(x, w), atol=1e-5, rtol=1e-5)


def test_freed_weight_drops_its_packed_copy() -> None:
    w = _weight()
    pack_weight(w)
    key = w.data_ptr()
    assert key in prepack._PACKED
    del w
    gc.collect()
    assert key not in prepack._PACKED


def test_unpacked_weight_falls_back_to_f_linear() -> None:
    w, x = _weight(seed=1), torch.randn(2, 32)
    assert not is_packed(w)
    torch.testing.assert_close(packed_linear(x, w, None), F.linear(x, w))


def test_pack_weight_rejects_what_onednn_cannot_pack() -> None:
    with pytest.raises(ValueError, match="fp32 CPU weight"):
        pack_weight(torch.randn(8, 8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="2-D"):
        pack_weight(torch.randn(8))


def test_linear_module_compiles_with_the_packed_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a compiled graph (dynamic rows) the op runs the packed copy, and the
    graph gives the same numbers as the eager module at every batch size."""
    lin = Linear(32, 48).requires_grad_(False)
    assert prepack.prepack_linears(lin) == 1 and lin.prepacked
    seen: list[bool] = []
    real = prepack.is_packed
    monkeypatch.setattr(prepack, "is_packed", lambda w: seen.append(real(w)) or seen[-1])
    compiled = torch.compile(lin, fullgraph=True, dynamic=True)
    for rows in (1, 7, 16):
        x = torch.randn(rows, 32)
        torch.testing.assert_close(
            compiled(x), F.linear(x, lin.weight, lin.bias), atol=1e-5, rtol=1e-5
        )
    assert seen == [True, True, True]  # the kernel ran once per call, on the packed copy


def test_prepack_wanted_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    cpu, big, small = torch.device("cpu"), 5_000_000, 1_000
    want = prepack.prepack_wanted
    monkeypatch.delenv("AUGSERVE_PREPACK", raising=False)
    assert want(None, big, cpu, torch.float32) and not want(None, small, cpu, torch.float32)
    assert not want(True, big, cpu, torch.bfloat16)  # fp32 only
    assert not want(True, big, torch.device("cuda"), torch.float32)  # CPU only
    assert want(True, small, cpu, torch.float32) and not want(False, big, cpu, torch.float32)
    monkeypatch.setenv("AUGSERVE_PREPACK", "1")
    assert want(None, small, cpu, torch.float32)
    monkeypatch.setenv("AUGSERVE_PREPACK", "0")
    assert not want(None, big, cpu, torch.float32)
    monkeypatch.setenv("AUGSERVE_PREPACK", "sometimes")
    with pytest.raises(ValueError, match="AUGSERVE_PREPACK"):
        want(None, big, cpu, torch.float32)
