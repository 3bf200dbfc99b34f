"""Incremental ranking (persistent queues, AugServe's kinetic heap) decides exactly as
keying and sorting every runnable request each iteration, for every policy."""

from __future__ import annotations

import random
from typing import Any

import pytest

from augserve.core.config import scheduler_config_for
from augserve.core.latency import LatencyProfile
from augserve.core.request import Request, Segment
from augserve.predict.base import make_predictor
from augserve.sched.output import SchedulerOutput, SchedulerUpdate
from augserve.sched.policies import POLICIES
from augserve.sched.policies.mars_queue import MARSQueue
from augserve.sim.simulator import simulate

TIGHT = LatencyProfile(
    name="tight",
    c0=0.010,
    c_prefill=0.0002,
    c_attn=1e-8,
    c_decode=0.0001,
    c_ctx=1e-6,
    kv_bytes=1,
    device_kv_bytes=16 * 60,  # 60 blocks: preemption, eviction and swaps all happen
    host_kv_bytes=16 * 40,
    swap_bandwidth=16 * 400.0,
    max_batch_tokens=96,
)


def trace(seed: int, n: int = 70) -> list[Request]:
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        segs = [
            Segment(rng.randint(1, 30), rng.choice([0.01, 0.1, 0.5, 2.0]), rng.randint(0, 40))
            for _ in range(rng.randint(0, 3))
        ]
        segs.append(Segment(rng.randint(1, 40)))
        arrival = round(rng.uniform(0, 6.0), 3) if i % 7 else 1.0  # some equal arrivals
        reqs.append(Request(f"r{i:02d}", arrival, rng.randint(4, 200), segs))
    return reqs


def decisions(policy: str, incremental: bool, seed: int, **over: Any) -> list[Any]:
    log: list[Any] = []

    def observe(end: float, out: SchedulerOutput, upd: SchedulerUpdate) -> None:
        log.append(
            (
                end,
                [(c.request_id, c.num_tokens, tuple(c.block_table)) for c in out.chunks],
                out.swap_out,
                out.swap_in,
                out.discarded,
                [(c.request.request_id, c.policy) for c in upd.calls_started],
                upd.finished_ids,
            )
        )

    cfg = scheduler_config_for(TIGHT, policy, incremental_ranking=incremental, **over)
    predictor = make_predictor("noisy:0.3", seed=seed)
    simulate(trace(seed), TIGHT, cfg, window=60.0, predictor=predictor, observer=observe,
             check=True)  # fmt: skip
    return log


VARIANTS = [{}, {"segment_cost": True}, {"beta": 0.0}, {"beta": 5e-3}]
MARS_VARIANTS = [
    {"mars_starvation_limit": 3, "mars_quantum": 4},
    {"mars_starvation_limit": 2, "mars_quantum": 3, "mars_boost_running": True},
]


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("seed", [1, 2])
def test_incremental_ranking_decides_as_a_full_sort(
    policy: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(MARSQueue, "TOP", 2)  # MARS sorts only its top: read past it often
    variants = VARIANTS if policy == "augserve" else [{}]
    if policy == "mars":
        variants = [{}, *MARS_VARIANTS]
    for over in variants:
        full = decisions(policy, False, seed, **over)
        assert len(full) > 100
        assert decisions(policy, True, seed, **over) == full, f"{policy} {over}"
