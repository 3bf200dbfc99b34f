"""Scheduling overhead: schedule() and update_from_output() per iteration, per policy.

Live requests: N, of which a third are paused in long calls; the rest decode
or prefill against the OPT-13B/H800 profile's KV capacity. After a warm-up,
each iteration times `schedule()` and `update_from_output()` separately (CPU
time); building the executor's results in between (`results_for`, the
executor's work) is not timed. Every policy runs `--repeats` times, the
policies in turn within each round (so all see the same machine), and the best
round counts. Prints milliseconds per iteration, the ratio of schedule +
update to the `vllm` policy's in the same run, and the time per scheduled
request (policies that batch more requests do more work per iteration).

    python benchmarks/bench_scheduler_overhead.py [--sizes 100,500,2000] [--iters 200]
        [--repeats 3] [--policies vllm,augserve] [--json docs/data/scheduler-overhead.json]

`--sizes` should cover the live-request counts the runs being explained reach:
`live_max` / `live_mean` in docs/data/main-comparison/main.csv (the overloaded
1800 s points hold thousands of live requests, most waiting).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from augserve.bench.report import git_commit
from augserve.core.config import SchedulerConfig
from augserve.core.request import Request, Segment
from augserve.predict.base import OraclePredictor
from augserve.profiles import load_profile
from augserve.sched.output import SchedulerOutput, StepEvent, StepResult
from augserve.sched.policies import POLICIES
from augserve.sched.scheduler import Scheduler


def build(policy: str, n: int, seed: int = 0) -> Scheduler:
    prof = load_profile("opt-13b-h800")
    cfg = SchedulerConfig(
        policy=policy,
        num_device_blocks=prof.device_blocks(16),
        num_host_blocks=prof.host_blocks(16),
        max_batch_tokens=prof.max_batch_tokens,
        max_num_seqs=prof.max_num_seqs,
    )
    sched = Scheduler(cfg, prof, OraclePredictor())
    rng = random.Random(seed)
    for i in range(n):
        paused = i % 3 == 0
        seg = Segment(1, 1e9, 10) if paused else Segment(10**6)
        sched.add_request(Request(f"r{i}", 0.0, rng.randint(50, 600), [seg, Segment(10)]), 0.0)
    return sched


def results_for(out: SchedulerOutput) -> dict[str, StepResult]:
    """The executor's report: a request whose segment has a call starts it at once."""
    res = {}
    for c in out.chunks:
        if c.sample:
            seg = c.request.current_segment
            call = seg is not None and seg.has_call
            res[c.request.request_id] = StepResult(7, StepEvent.CALL if call else StepEvent.NONE)
    return res


@dataclass
class Measure:
    schedule_s: float  # CPU seconds per iteration
    update_s: float
    paused: int
    batch: float  # scheduled requests per iteration

    @property
    def total_s(self) -> float:
        return self.schedule_s + self.update_s


def measure(policy: str, n: int, iters: int) -> Measure:
    sched = build(policy, n)
    now = 0.0
    for _ in range(50):  # warm up: prefill, pause a third
        out = sched.schedule(now)
        now += 0.02
        sched.update_from_output(out, results_for(out), now)
    clock = time.process_time
    t_sched = t_upd = 0.0
    batch = 0
    gc.collect()
    for _ in range(iters):
        t0 = clock()
        out = sched.schedule(now)
        t_sched += clock() - t0
        now += 0.02
        results = results_for(out)
        t0 = clock()
        sched.update_from_output(out, results, now)
        t_upd += clock() - t0
        batch += len(out.chunks)
    return Measure(t_sched / iters, t_upd / iters, sched.num_in_calls(), batch / iters)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,500,2000")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3, help="rounds; the best one counts")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--json", type=Path, help="also write every figure here (committed data)")
    args = ap.parse_args()
    rows: list[dict[str, object]] = []
    sizes = [int(s) for s in args.sizes.split(",")]
    policies = args.policies.split(",")
    if "vllm" not in policies:
        policies.insert(0, "vllm")
    print("CPU time per iteration: schedule(), update_from_output(), both; best of", args.repeats)
    head = f"{'live':>6} {'policy':>14} {'sched ms':>8} {'update ms':>9} {'both ms':>8}"
    print(f"{head} {'x vllm':>6} {'us/req':>6} {'paused':>6} {'batch':>6}")
    for n in sizes:
        best: dict[str, Measure] = {}
        for _ in range(args.repeats):
            for policy in policies:
                m = measure(policy, n, args.iters)
                if policy not in best or m.total_s < best[policy].total_s:
                    best[policy] = m
        base = best["vllm"].total_s
        for policy in policies:
            m = best[policy]
            rows.append(
                {"live": n, "policy": policy, "schedule_cpu_ms": m.schedule_s * 1e3,
                 "update_cpu_ms": m.update_s * 1e3, "both_cpu_ms": m.total_s * 1e3,
                 "x_vllm": m.total_s / base, "paused": m.paused, "batch": m.batch}
            )  # fmt: skip
            print(
                f"{n:>6} {policy:>14} {m.schedule_s * 1e3:>8.3f} {m.update_s * 1e3:>9.3f} "
                f"{m.total_s * 1e3:>8.3f} {m.total_s / base:>6.2f} "
                f"{m.total_s * 1e6 / max(m.batch, 1e-9):>6.2f} {m.paused:>6} {m.batch:>6.0f}"
            )

    if args.json:
        commit = git_commit()
        meta = {
            "command": "python benchmarks/bench_scheduler_overhead.py " + " ".join(sys.argv[1:]),
            "commit": commit,
            "clock": "CPU time (time.process_time), best round of --repeats",
            "load_average": os.getloadavg(),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
