"""The simulator's fingerprint: short deterministic runs, each reduced to a sha256.

A refactor of the scheduling layer must leave every run bit-identical (issue 39,
docs/design.md "One scheduler, two executors"). Each run simulates a fixed-seed
workload under one policy and hashes every request's full outcome (arrival,
first token, finish, tokens, preemptions, cached tokens, every call with its
context policy) together with the run's counters.

    python benchmarks/sim_fingerprint.py OUT.json [--only NAME,...]

`tests/sched/test_fingerprint.py` recomputes the cheapest runs and compares them
with `docs/data/refactor-fingerprint-before.json`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from augserve.core.metrics import SLOConfig, compute_metrics
from augserve.core.request import Request
from augserve.sim.simulator import SimResult

# KV pressure: a device pool of a few requests' worth, with a host swap pool
_TIGHT = (("num_device_blocks", "400"), ("num_host_blocks", "800"), ("swap_budget_blocks", "8"))


@dataclass(frozen=True)
class Run:
    """One fingerprinted run: a `BenchPoint`'s fields, short."""

    name: str
    policy: str
    workload: str = "infercept-like"
    rate: float = 8.0
    window: float = 40.0
    drain: float = 80.0
    seed: int = 1
    predictor: str = "oracle"
    overrides: tuple[tuple[str, str], ...] = ()


RUNS = (
    Run("vllm", "vllm"),
    Run("infercept", "infercept"),
    Run("ssjf", "ssjf"),
    Run("mars", "mars"),
    Run("augserve", "augserve"),
    Run("augserve-slo", "augserve-slo"),
    Run("continuum", "continuum"),
    Run("vllm-apc-sessions", "vllm-apc", workload="agent-sessions", rate=1.0),
    Run("augserve-slo-sessions", "augserve-slo", workload="agent-sessions", rate=1.0),
    Run(
        "augserve-sessions-ttl",
        "augserve",
        workload="agent-sessions",
        rate=1.0,
        overrides=(("session_ttl", "30"), ("enable_prefix_caching", "true")),
    ),
    Run("vllm-tight", "vllm", overrides=_TIGHT),
    Run("infercept-tight", "infercept", overrides=_TIGHT),
    Run("ssjf-infercept-tight", "ssjf-infercept", overrides=_TIGHT),
    Run("mars-tight", "mars", overrides=_TIGHT),
    Run("augserve-tight", "augserve", overrides=_TIGHT),
    Run("augserve-slo-tight", "augserve-slo", overrides=_TIGHT),
    Run("continuum-tight", "continuum", overrides=_TIGHT),
    Run("augserve-noisy-tight", "augserve", predictor="noisy:0.5", overrides=_TIGHT),
)


def request_outcome(r: Request) -> list[Any]:
    """Everything a run decided about one request (floats as repr: exact)."""
    calls = [
        [repr(c.start), repr(c.end), c.returned_tokens, c.policy.value if c.policy else None]
        for c in r.calls
    ]
    return [
        r.request_id,
        repr(r.arrival_time),
        repr(r.first_scheduled_time),
        repr(r.first_token_time),
        repr(r.finish_time),
        r.finish_reason.value if r.finish_reason else None,
        r.status.name,
        r.num_tokens,
        r.num_computed_tokens,
        r.num_generated_tokens,
        r.num_returned_tokens,
        r.segment_index,
        r.num_preemptions,
        r.num_cached_tokens,
        r.num_cached_prompt_tokens,
        repr(r.exec_time),
        calls,
    ]


def stats_outcome(res: SimResult) -> dict[str, Any]:
    """The run's deterministic counters (the wall-time ones left out)."""
    s = res.stats
    return {
        "iterations": s.iterations,
        "empty_schedules": s.empty_schedules,
        "busy_time": repr(s.busy_time),
        "swap_stall_time": repr(s.swap_stall_time),
        "swapped_blocks": s.swapped_blocks,
        "discards": s.discards,
        "calls": s.calls,
        "end_time": repr(s.end_time),
        "stalled": s.stalled,
        "prefix_queries": s.prefix.queries,
        "prefix_hits": s.prefix.hits,
    }


def fingerprint(run: Run) -> dict[str, Any]:
    """Simulate `run`; its sha256 over every request's outcome and the counters."""
    from augserve.bench.runner import BenchPoint, build_requests, point_scheduler_config
    from augserve.predict.base import make_predictor
    from augserve.profiles import load_profile
    from augserve.sim.simulator import simulate

    point = BenchPoint(
        policy=run.policy, rate=run.rate, seed=run.seed, workload=run.workload,
        window=run.window, drain=run.drain, predictor=run.predictor, overrides=run.overrides,
    )  # fmt: skip
    profile = load_profile(point.profile)
    config = point_scheduler_config(point, profile)
    requests = build_requests(point)
    predictor = make_predictor(point.predictor, seed=point.seed)
    res = simulate(requests, profile, config, point.window, point.drain, predictor)
    outcome = {
        "requests": [request_outcome(r) for r in sorted(res.requests, key=lambda r: r.request_id)],
        "stats": stats_outcome(res),
    }
    blob = json.dumps(outcome, sort_keys=True, separators=(",", ":")).encode()
    slo = SLOConfig.from_iteration_time(profile.decode_iter_time())
    m = compute_metrics(res.requests, slo, start=0.0, end=point.window + point.drain)
    preemptions = sum(r.num_preemptions for r in res.requests)
    return {
        "sha256": hashlib.sha256(blob).hexdigest(),
        "requests": len(res.requests),
        "finished": len(res.finished),
        "preemptions": preemptions,
        "summary": {k: v for k, v in sorted(m.to_dict().items()) if isinstance(v, int | float)},
        "stats": outcome["stats"],
    }


def _commit() -> str:
    here = Path(__file__).resolve().parent
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "augserve"], cwd=here.parent,
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return out.stdout.strip() + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--only", default=None, help="comma-separated run names")
    args = ap.parse_args(argv)
    runs = [r for r in RUNS if args.only is None or r.name in args.only.split(",")]
    results: dict[str, Any] = {}
    for run in runs:
        t0 = time.perf_counter()
        results[run.name] = fingerprint(run)
        wall = time.perf_counter() - t0
        r = results[run.name]
        print(f"{run.name:>24} {r['sha256'][:16]} reqs={r['requests']} fin={r['finished']} "
              f"preempt={r['preemptions']} swapped={r['stats']['swapped_blocks']} "
              f"discards={r['stats']['discards']} wall={wall:.1f}s", flush=True)  # fmt: skip
    doc = {
        "command": "python " + " ".join(["benchmarks/sim_fingerprint.py", *(argv or sys.argv[1:])]),
        "commit": _commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load": os.getloadavg(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "runs": {name: {"run": vars(run)} | results[name] for run in runs
                 for name in [run.name]},
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, default=list) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
