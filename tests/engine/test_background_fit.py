"""The start-up latency fit after the engine serves, and a cache it cannot break
(issues 34 and 35): borrowed blocks only, a NaN or corrupt cache file refitted, an
unwritable cache dir one warning line."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest

from augserve.core.block_pool import BlockPool
from augserve.core.latency import LatencyProfile
from augserve.engine.background_fit import LatencyFit, SwitchableLatency, borrow_device
from augserve.engine.builder import EngineArgs, build_engine
from augserve.engine.make_model import make_model


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("m") / "m", seed=0)


def _engine(model: Path, **kw):
    return build_engine(
        EngineArgs(model=str(model), dtype="fp32", num_device_blocks=64, num_host_blocks=8,
                   fit_latency=True, **kw)
    )  # fmt: skip


def test_borrows_only_blocks_no_request_or_prefix_holds() -> None:
    pool = BlockPool(8, 2, 16)
    held = pool.device.allocate(3)  # a request's blocks
    pool.device.cache_block(held[2], 1234)
    pool.device.free([held[2]])  # cached free: a prefix another request may hit
    got = borrow_device(pool, 100)
    assert sorted(got) == [3, 4, 5, 6, 7]
    assert borrow_device(pool, 1) == []  # nothing plain left: the fit waits
    pool.device.free(got)
    assert pool.device.num_cached_free == 1 and pool.device.cached == {1234: held[2]}


def test_a_fit_in_the_background_switches_the_engine(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    engine = _engine(model, fit_in_background=True)
    fit = engine.latency_fit
    assert isinstance(fit, LatencyFit) and isinstance(engine.latency, SwitchableLatency)
    assert engine.latency_source == "default"
    placeholder_tau = engine.scheduler.policy.tau_iter
    seen: list[list[int]] = []

    def record(runner, spec, blocks):
        seen.append(list(blocks))
        return 0.01 + 1e-4 * sum(n for n, _ in spec[0]) + 1e-3 * len(spec[1])

    fit.measure = record
    held = engine.scheduler.pool.device.allocate(10)  # as if a request held them
    pieces = 0
    while engine.latency_fit is not None:
        engine.fit_step()
        pieces += 1
    assert pieces == len(fit.specs) + 1 and fit.done.is_set()
    assert all(not set(b) & set(held) for b in seen)  # never wrote a request's blocks
    assert engine.latency_source == "fitted"
    assert engine.latency.current == fit.result
    assert engine.scheduler.policy.tau_iter == pytest.approx(fit.result.decode_iter_time())
    assert engine.scheduler.policy.tau_iter != placeholder_tau
    engine.scheduler.pool.device.free(held)
    # cached for the next start, which then needs no fit
    again = _engine(model, fit_in_background=True)
    assert again.latency_source == "cached" and again.latency_fit is None
    assert again.latency == fit.result


def test_a_nan_in_the_cached_profile_is_ignored_and_rebuilt(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _engine(model).latency_source == "fitted"
    (cached,) = (tmp_path / "augserve" / "latency").glob("*.json")
    data = json.loads(cached.read_text())
    cached.write_text(json.dumps({**data, "c0": float("nan")}))  # json writes NaN
    with caplog.at_level(logging.WARNING, logger="augserve"):
        rebuilt = _engine(model)
    assert rebuilt.latency_source == "fitted"
    assert any("c0 must be finite" in r.getMessage() for r in caplog.records)
    assert math.isfinite(json.loads(cached.read_text())["c0"])
    cached.write_text("[1, 2")  # truncated: also refitted
    assert _engine(model).latency_source == "fitted"


def test_a_profile_refuses_non_finite_numbers() -> None:
    good = LatencyProfile("p", 1e-3, 1e-5, 0.0, 1e-4, 0.0, 100, 10_000, 0, 1e9, 512)
    for field in ("c0", "swap_bandwidth", "c_ctx"):
        for bad in (float("nan"), float("inf")):
            with pytest.raises(ValueError, match=f"LatencyProfile.{field} must be finite"):
                LatencyProfile.from_dict({**good.to_dict(), field: bad})
    with pytest.raises(ValueError, match="c0 must be a number"):
        LatencyProfile.from_dict({**good.to_dict(), "c0": "fast"})


def test_an_unwritable_cache_dir_is_one_warning_line(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with caplog.at_level(logging.WARNING, logger="augserve"):
        assert _engine(model).latency_source == "fitted"
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "not cached" in warnings[0].getMessage()
    assert warnings[0].exc_info is None
