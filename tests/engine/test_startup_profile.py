"""The latency model fitted at start-up, cached per model and machine (issue 24)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from augserve.core.latency import BatchShape
from augserve.engine.builder import EngineArgs, build_engine
from augserve.engine.make_model import make_model
from augserve.engine.startup_profile import startup_grid


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("m") / "m", seed=0)


def _engine(model: Path, **kw):
    return build_engine(EngineArgs(model=str(model), dtype="fp32", num_device_blocks=64, **kw))


def test_fitted_then_cached_and_a_file_wins(
    model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with caplog.at_level(logging.INFO, logger="augserve"):
        first = _engine(model, fit_latency=True)
    assert first.latency_source == "fitted"
    assert any("batch shapes" in r.getMessage() for r in caplog.records)  # progress line
    assert len(list((tmp_path / "augserve" / "latency").glob("*.json"))) == 1
    lat = first.latency
    decode = lat.iteration_time(BatchShape(0, 0, 1, 64))
    assert 0 < decode < 1.0 and lat.prefill_time(256) > decode  # priced like an engine
    second = _engine(model, fit_latency=True)
    assert second.latency_source == "cached" and second.latency == lat
    other_kv = build_engine(
        EngineArgs(model=str(model), dtype="fp32", num_device_blocks=32, fit_latency=True)
    )
    assert other_kv.latency_source == "fitted"  # another KV layout: another fit
    assert _engine(model, fit_latency=True, profile="opt-13b-h800").latency_source == "file"
    assert _engine(model).latency_source == "default"


def test_startup_grid_is_short_and_varies_every_term() -> None:
    specs = startup_grid(512, 2048)
    assert 8 <= len(specs) <= 14
    assert any(p and not d for p, d in specs) and any(d and not p for p, d in specs)
    assert any(p and d for p, d in specs) and any(p and p[0][1] > 0 for p, _ in specs)
    assert {len(d) for _, d in specs if d} >= {1, 4, 16}
    assert all(n + s < 2048 for p, _ in specs for n, s in p)
    # the long contexts agent turns resume on: a chunk over one and decodes on it
    assert max(s for p, _ in specs for _, s in p) >= 1024
    assert max(c for _, d in specs for c in d) >= 1024
    short = startup_grid(64, 512)  # a short model: the long shapes stay inside it
    assert all(n + s < 512 for p, _ in short for n, s in p)
    assert all(c < 512 for _, d in short for c in d)
