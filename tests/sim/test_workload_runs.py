"""The simulator on generated workloads: determinism, accounting, scheduler invariants."""

from __future__ import annotations

from dataclasses import replace

import pytest

from augserve.core.config import scheduler_config_for
from augserve.core.latency import LatencyProfile
from augserve.core.request import Request
from augserve.predict.base import make_predictor
from augserve.profiles import load_profile
from augserve.sim.simulator import SimResult, Simulator, simulate
from augserve.workload import infercept_like, poisson_arrivals

POLICIES = ("vllm", "infercept", "ssjf", "mars", "augserve")


def _tight_profile() -> LatencyProfile:
    """OPT-13B/H800 with room for ~6k tokens on device and ~6k on host: memory binds."""
    p = load_profile("opt-13b-h800")
    return replace(p, device_kv_bytes=p.kv_bytes * 6000, host_kv_bytes=p.kv_bytes * 6000)


def _requests(rate: float, window: float, seed: int) -> list[Request]:
    times = poisson_arrivals(rate, duration=window, seed=seed)
    return infercept_like(len(times), seed).to_requests(times)


def _run(
    policy: str,
    profile: LatencyProfile,
    seed: int = 1,
    check: bool = False,
    predictor: str = "oracle",
    window: float = 20.0,
    drain: float = 0.0,
    rate: float = 4.0,
) -> SimResult:
    cfg = scheduler_config_for(profile, policy, predictor=predictor)
    return simulate(
        _requests(rate, window, seed),
        profile,
        cfg,
        window,
        drain,
        make_predictor(predictor, seed=seed),
        check=check,
    )


def _fingerprint(res: SimResult) -> list[tuple[object, ...]]:
    return [
        (
            r.request_id,
            r.status,
            r.first_token_time,
            r.finish_time,
            r.num_generated_tokens,
            tuple((c.start, c.end, c.policy) for c in r.calls),
        )
        for r in res.requests
    ]


@pytest.mark.parametrize("policy", POLICIES)
def test_invariants_hold_under_memory_pressure(policy: str) -> None:
    res = _run(policy, _tight_profile(), check=True)  # checks after every iteration
    assert res.stats.iterations > 0
    assert not res.stats.stalled
    assert res.stats.discards + res.stats.swapped_blocks > 0  # memory really was short


@pytest.mark.parametrize("policy", ["vllm", "augserve", "mars"])
def test_identical_seeds_give_identical_results(policy: str) -> None:
    prof = _tight_profile()
    a = _run(policy, prof, seed=3, predictor="noisy:0.3")
    b = _run(policy, prof, seed=3, predictor="noisy:0.3")
    assert _fingerprint(a) == _fingerprint(b)
    assert a.stats.iterations == b.stats.iterations
    assert a.stats.busy_time == b.stats.busy_time


def test_different_seeds_differ() -> None:
    prof = load_profile("opt-13b-h800")
    assert _fingerprint(_run("augserve", prof, seed=1)) != _fingerprint(
        _run("augserve", prof, seed=2)
    )


@pytest.mark.parametrize("policy", POLICIES)
def test_every_request_is_accounted_for(policy: str) -> None:
    prof = _tight_profile()
    sim = Simulator(prof, scheduler_config_for(prof, policy), make_predictor("oracle"))
    res = sim.run(_requests(6.0, 20.0, 5), window=20.0)
    assert res.unfinished and res.finished  # the window cuts the run short
    assert sim.sched is not None
    live = {r.request_id for r in sim.sched.live_requests()}
    ids = [r.request_id for r in res.requests]
    split = res.finished + res.unfinished + res.not_arrived
    assert sorted(r.request_id for r in split) == sorted(ids)
    assert len(split) == len(ids)
    for r in res.finished:
        assert r.is_finished and r.finish_time is not None and r.finish_time <= res.end
        assert r.first_token_time is not None and r.first_token_time >= r.arrival_time
    for r in res.unfinished:  # live in the scheduler, or finished after the stop
        assert r.request_id in live or (r.finish_time is not None and r.finish_time > res.end)
    assert live <= {r.request_id for r in res.unfinished}


@pytest.mark.parametrize("policy", POLICIES)
def test_a_long_drain_finishes_everything(policy: str) -> None:
    res = _run(policy, _tight_profile(), seed=2, window=10.0, drain=2000.0, rate=3.0)
    assert not res.unfinished, [(r.request_id, r.status) for r in res.unfinished]
    assert len(res.finished) == len(res.requests)
    for r in res.finished:
        planned = sum(max(1, s.output_len) for s in r.segments)
        assert r.num_generated_tokens == planned
        assert len(r.calls) == sum(1 for s in r.segments if s.has_call)
