"""The engine backend of `augserve bench`: real-time replay with scripted calls."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from augserve.bench.engine_backend import run_point, trace_arrivals
from augserve.core.config import SchedulerConfig
from augserve.core.request import Request, Segment
from augserve.engine.builder import default_latency
from augserve.engine.driver import RealClock, TraceDriver
from augserve.engine.engine import LLMEngine
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner
from augserve.engine.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("bench") / "m", seed=4)


def test_run_requests_replays_the_plan(model_dir: Path) -> None:
    runner = ModelRunner.from_dir(
        model_dir, "fp32", block_size=8, num_device_blocks=48, num_host_blocks=16
    )
    cfg = SchedulerConfig(policy="augserve", max_batch_tokens=64)
    engine = LLMEngine(runner, cfg, Tokenizer(model_dir), default_latency(runner, cfg))
    plans = [
        [Segment(4, call_time=0.4, return_len=6), Segment(5)],
        [Segment(7)],
        [
            Segment(3, call_time=0.2, return_len=3),
            Segment(2, call_time=0.6, return_len=4),
            Segment(3),
        ],
        [Segment(6, call_time=1.0, return_len=2), Segment(4)],
    ]
    reqs = [Request(f"r{i}", 0.1 * i, 10 + 5 * i, segments=p) for i, p in enumerate(plans)]
    arrivals, clipped = trace_arrivals(engine, reqs)
    stats = TraceDriver(engine, RealClock(time_scale=0.1)).run(arrivals, until=30.0)
    done = reqs
    assert clipped == 0 and not stats.stalled
    assert all(r.is_finished and r.finish_reason.value == "stop" for r in done)
    for r, p in zip(done, plans, strict=True):
        assert r.num_generated_tokens == sum(s.output_len for s in p)
        assert r.num_returned_tokens == sum(s.return_len for s in p)
        assert len(r.calls) == sum(1 for s in p if s.has_call)
        assert all(
            c.end - c.start >= 0.9 * d
            for c, d in zip(r.calls, [s.call_time for s in p if s.has_call], strict=True)
        )
        assert r.first_token_time is not None and r.finish_time is not None
    assert stats.calls == 4 and stats.iterations > 0
    assert engine.stats().device_blocks_used == 0 and engine.stats().host_blocks_used == 0


def test_run_point(model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from augserve.bench.runner import BenchPoint

    runner = ModelRunner.from_dir(
        model_dir, "fp32", block_size=16, num_device_blocks=64, num_host_blocks=32
    )
    prof = replace(default_latency(runner, SchedulerConfig(max_batch_tokens=128)), name="tiny")
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(prof.to_dict()))
    monkeypatch.setenv("AUGSERVE_ENGINE_MODEL", str(model_dir))
    monkeypatch.setenv("AUGSERVE_ENGINE_DTYPE", "fp32")
    monkeypatch.setenv("AUGSERVE_ENGINE_TIME_SCALE", "0.01")
    point = BenchPoint(
        policy="augserve",
        rate=1.0,
        backend="engine",
        workload="infercept-like",
        seed=1,
        profile=str(path),
        window=10.0,
        drain=5000.0,
    )
    [row] = run_point(point)
    assert row["num_offered"] >= 5 and row["engine_finished"] == row["num_offered"]
    assert row["calls"] > 0 and row["iterations"] > 0


def test_bench_cli_engine_backend(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`augserve bench --backend engine --model DIR` runs a point on the real engine."""
    from augserve.cli import main

    for var in ("MODEL", "DTYPE", "TIME_SCALE"):  # restored after the test
        monkeypatch.setenv(f"AUGSERVE_ENGINE_{var}", "unset")
    runner = ModelRunner.from_dir(model_dir, "fp32", block_size=16, num_device_blocks=64)
    prof = replace(default_latency(runner, SchedulerConfig(max_batch_tokens=128)), name="tiny")
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(prof.to_dict()))
    out = tmp_path / "out"
    rc = main(
        [
            "bench", "--backend", "engine", "--model", str(model_dir), "--dtype", "fp32",
            "--time-scale", "0.01", "--profile", str(path), "--workload", "infercept-like",
            "--policies", "augserve", "--rates", "1", "--window", "8", "--drain", "5000",
            "--set", "beta_high=1.0", "--out", str(out), "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert len(rows) == 1 and rows[0]["policy"] == "augserve"
    assert rows[0]["engine_finished"] == rows[0]["num_offered"] >= 3
