"""Simulator speed: wall time, simulated/real time ratio and peak memory per policy.

Target (issue 4): the INFERCEPT trace on OPT-13B/H800, Poisson 3 req/s over a
30-minute window (~5400 requests) simulates in at most 60 s of wall time per
policy, with a peak resident memory under 2 GiB.

    python benchmarks/bench_sim_speed.py [--rate 3] [--window 1800] [--policies ...]

Each policy runs in a fresh process (one at a time), so its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time
from typing import Any


def _one(args: tuple[str, float, float, str, str]) -> dict[str, Any]:
    policy, rate, window, trace, profile = args
    from augserve.bench.runner import BenchPoint, build_requests
    from augserve.core.config import scheduler_config_for
    from augserve.predict.base import make_predictor
    from augserve.profiles import load_profile
    from augserve.sim.simulator import simulate

    point = BenchPoint(policy=policy, rate=rate, trace=trace, profile=profile, window=window)
    prof = load_profile(profile)
    requests = build_requests(point)
    cfg = scheduler_config_for(prof, policy)
    t0 = time.perf_counter()
    res = simulate(requests, prof, cfg, window, 0.0, make_predictor("oracle"))
    wall = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "policy": policy,
        "requests": len(requests),
        "iterations": res.stats.iterations,
        "wall_s": wall,
        "sim_per_real": window / wall,
        "sched_share": res.stats.sched_wall_s / wall,
        "sched_ms_per_iter": res.stats.sched_ms_per_iter,
        "peak_rss_mib": peak_kib / 1024,
        "finished": len(res.finished),
    }


def main(argv: list[str] | None = None) -> int:
    from augserve.bench.runner import default_trace_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="vllm,infercept,ssjf,mars,augserve")
    ap.add_argument("--rate", type=float, default=3.0)
    ap.add_argument("--window", type=float, default=1800.0)
    ap.add_argument("--trace", default=None)
    ap.add_argument("--profile", default="opt-13b-h800")
    args = ap.parse_args(argv)
    trace = args.trace or str(default_trace_path())
    print(f"trace={trace} profile={args.profile} rate={args.rate} window={args.window:g}s")
    header = (
        f"{'policy':>10} {'reqs':>6} {'iters':>8} {'wall_s':>8} {'sim/real':>9} "
        f"{'sched%':>7} {'ms/iter':>8} {'peakMiB':>8} {'ok':>3}"
    )
    print(header)
    ctx = mp.get_context("spawn")
    worst = 0.0
    ok_all = True
    for policy in args.policies.split(","):
        with ctx.Pool(1) as pool:
            r = pool.apply(_one, ((policy, args.rate, args.window, trace, args.profile),))
        ok = r["wall_s"] <= 60.0 and r["peak_rss_mib"] < 2048
        ok_all &= ok
        worst = max(worst, r["wall_s"])
        print(
            f"{r['policy']:>10} {r['requests']:>6} {r['iterations']:>8} {r['wall_s']:>8.1f} "
            f"{r['sim_per_real']:>9.1f} {100 * r['sched_share']:>6.1f}% "
            f"{r['sched_ms_per_iter']:>8.3f} {r['peak_rss_mib']:>8.0f} "
            f"{'yes' if ok else 'NO':>3}",
            flush=True,
        )
    print(
        f"slowest policy: {worst:.1f} s (target <= 60 s, peak RSS < 2 GiB): "
        f"{'met' if ok_all else 'NOT met'}"
    )
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
