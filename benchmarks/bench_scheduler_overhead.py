"""Scheduling overhead: schedule() + update_from_output() per iteration, per policy.

Live requests: N, of which a third are paused in long calls; the rest decode
or prefill against the OPT-13B/H800 profile's KV capacity. Prints wall time
per iteration and the ratio to the `vllm` policy measured in the same run.

    python benchmarks/bench_scheduler_overhead.py [--sizes 100,500,2000] [--iters 200]
"""

from __future__ import annotations

import argparse
import random
import time

from augserve.core.config import SchedulerConfig
from augserve.core.request import Request, Segment
from augserve.predict.base import OraclePredictor
from augserve.profiles import load_profile
from augserve.sched.output import StepEvent, StepResult
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


def results_for(out) -> dict[str, StepResult]:  # type: ignore[no-untyped-def]
    res = {}
    for c in out.chunks:
        if c.sample:
            seg = c.request.current_segment
            call = seg is not None and seg.has_call and c.request.segment_generated + 1 >= 1
            res[c.request.request_id] = StepResult(7, StepEvent.CALL if call else StepEvent.NONE)
    return res


def measure(policy: str, n: int, iters: int) -> tuple[float, float, int, int]:
    sched = build(policy, n)
    now = 0.0
    for _ in range(50):  # warm up: prefill, pause a third
        out = sched.schedule(now)
        now += 0.02
        sched.update_from_output(out, results_for(out), now)
    wall = cpu = 0.0
    batch = 0
    for _ in range(iters):
        t0, c0 = time.perf_counter(), time.process_time()
        out = sched.schedule(now)
        now += 0.02
        sched.update_from_output(out, results_for(out), now)
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        batch += len(out.chunks)
    return wall / iters, cpu / iters, sched.num_in_calls(), batch // iters


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,500,2000")
    ap.add_argument("--iters", type=int, default=200)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print("wall and CPU time of schedule() + update_from_output() per iteration")
    head = f"{'live':>6} {'policy':>10} {'wall ms':>8} {'cpu ms':>7} {'cpu x vllm':>10}"
    print(f"{head} {'paused':>7} {'batch':>6}")
    for n in sizes:
        base = None
        for policy in POLICIES:
            wall, cpu, paused, batch = measure(policy, n, args.iters)
            base = cpu if policy == "vllm" else base
            ratio = cpu / base if base else 1.0
            print(
                f"{n:>6} {policy:>10} {wall * 1e3:>8.3f} {cpu * 1e3:>7.3f} {ratio:>10.2f} "
                f"{paused:>7} {batch:>6}"
            )


if __name__ == "__main__":
    main()
