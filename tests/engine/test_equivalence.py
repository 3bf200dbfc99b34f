"""The simulator decides exactly as the engine does (docs/design.md: one scheduler, two executors).

The same small trace runs twice per policy: in the simulator, and on the real
engine (a tiny model) driven on a virtual clock with the same latency profile.
Both report every iteration's `SchedulerOutput` and `SchedulerUpdate`; the
two sequences of scheduled chunks (with block tables), swaps, discards, calls
started and finishes must be identical.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from augserve.bench.engine_backend import trace_arrivals
from augserve.core.config import SchedulerConfig, scheduler_config_for
from augserve.core.latency import LatencyProfile
from augserve.core.request import Request, Segment
from augserve.engine.builder import default_latency
from augserve.engine.driver import TraceDriver, VirtualClock
from augserve.engine.engine import LLMEngine
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner
from augserve.engine.tokenizer import Tokenizer
from augserve.predict.base import OraclePredictor
from augserve.sched.output import SchedulerOutput, SchedulerUpdate
from augserve.sched.policies import POLICIES
from augserve.sim.simulator import simulate

BLOCK = 8


def trace(seed: int = 3, n: int = 14) -> list[Request]:
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        segs = [
            Segment(
                rng.randint(2, 12), rng.choice([0.001, 0.02, 0.2, 0.8, 2.0]), rng.randint(0, 24)
            )
            for _ in range(rng.randint(0, 2))
        ]
        segs.append(Segment(rng.randint(2, 14)))
        reqs.append(Request(f"r{i}", round(i * 0.013, 6), rng.randint(10, 70), segs))
    return reqs


class Log:
    def __init__(self) -> None:
        self.steps: list[tuple[Any, ...]] = []

    def __call__(self, end: float, out: SchedulerOutput, upd: SchedulerUpdate) -> None:
        chunks = tuple(
            (c.request_id, c.num_tokens, c.start_pos, c.sample, tuple(c.block_table))
            for c in out.chunks
        )
        calls = tuple((c.request.request_id, c.policy.value) for c in upd.calls_started)
        self.steps.append(
            (
                end,
                chunks,
                tuple(out.swap_out),
                tuple(out.swap_in),
                tuple(out.discarded),
                tuple(upd.kv_discarded),
                calls,
                tuple((f.request.request_id, f.reason.value) for f in upd.finished),
            )
        )


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, LatencyProfile]:
    model = make_model("llama", "tiny", tmp_path_factory.mktemp("eq") / "m", seed=5)
    runner = ModelRunner.from_dir(
        model, "fp32", block_size=BLOCK, num_device_blocks=24, num_host_blocks=12
    )
    profile = replace(default_latency(runner, SchedulerConfig(max_batch_tokens=48)), name="eq")
    return model, profile


def run_both(
    model: Path,
    profile: LatencyProfile,
    config: SchedulerConfig,
    make_trace: Callable[[], list[Request]],
    make_predictor: Callable[[], Any],
) -> tuple[Log, Log, LLMEngine, list[Request]]:
    """The trace in the simulator and on the engine (a virtual clock): both logs, the
    engine and its requests; every request finished in both."""
    sim_log = Log()
    sim = simulate(make_trace(), profile, config, window=1e6, predictor=make_predictor(),
                   observer=sim_log, check=True)  # fmt: skip
    assert len(sim.finished) == len(sim.requests)
    runner = ModelRunner.from_dir(
        model, "fp32", block_size=BLOCK, num_device_blocks=24, num_host_blocks=12
    )
    engine = LLMEngine(runner, config, Tokenizer(model), profile, make_predictor())
    eng_log = Log()
    requests = make_trace()
    arrivals, clipped = trace_arrivals(engine, requests)
    stats = TraceDriver(engine, VirtualClock(profile, BLOCK), observer=eng_log).run(arrivals)
    assert clipped == 0 and not stats.stalled
    assert all(r.is_finished and r.finish_reason.value == "stop" for r in requests)
    return sim_log, eng_log, engine, requests


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_engine_on_a_virtual_clock_decides_as_the_simulator(
    setup: tuple[Path, LatencyProfile], policy: str
) -> None:
    model, profile = setup
    config = scheduler_config_for(profile, policy, block_size=BLOCK, swap_budget_blocks=2)
    assert (config.num_device_blocks, config.num_host_blocks) == (24, 12)
    sim_log, eng_log, _, _ = run_both(model, profile, config, trace, OraclePredictor)

    assert len(eng_log.steps) == len(sim_log.steps) > 30
    for k, (e, s) in enumerate(zip(eng_log.steps, sim_log.steps, strict=True)):
        assert e == s, f"{policy}: iteration {k} differs"
    # the trace exercises the memory decisions, not just plain batching
    moves = [x for step in sim_log.steps for x in (*step[2], *step[4], *step[5])]
    assert moves, f"{policy}: no swap or discard happened"


def overload(seed: int = 11, n: int = 16) -> list[Request]:
    """A burst far past the pool (24 blocks of 8 tokens): long decodes, some calls."""
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        segs = [
            Segment(rng.randint(4, 20), 0.05, rng.randint(0, 8)) for _ in range(rng.randint(0, 1))
        ]
        segs.append(Segment(rng.randint(20, 60)))
        reqs.append(Request(f"o{i}", 0.0, rng.randint(6, 40), segs))
    return reqs


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_overload_finishes_on_the_engine_as_in_the_simulator(
    setup: tuple[Path, LatencyProfile], policy: str
) -> None:
    """The progress rules (`sched/progress.py`) on the real engine: an overload where
    every request needs a good share of the pool finishes every request with bounded
    recompute, deciding exactly as the simulator does (online predictions: what the
    server runs)."""
    from augserve.predict.online import OnlinePredictor

    model, profile = setup
    config = scheduler_config_for(profile, policy, block_size=BLOCK, swap_budget_blocks=2)
    sim_log, eng_log, engine, requests = run_both(model, profile, config, overload, OnlinePredictor)
    assert eng_log.steps == sim_log.steps
    s = engine.scheduler.stats()
    assert sum(s.preemptions.values()) > 0  # the pool was overloaded
    assert s.recomputed_tokens <= 6 * sum(r.num_tokens for r in requests)
