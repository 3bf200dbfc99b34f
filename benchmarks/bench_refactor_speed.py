"""Two checkouts of augserve side by side: the simulator's speed before and after a refactor.

Each policy's point runs in a fresh process per checkout, the two alternating,
`--repeat` times; the result is the median of each and their ratio (after / before)
for the simulation's wall time and the CPU time inside `schedule()` per iteration.
Both checkouts simulate the same requests, so the iteration counts must agree.

    git archive BEFORE augserve | tar -x -C /tmp/before
    python benchmarks/bench_refactor_speed.py --before /tmp/before --after . OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

_ONE = """
import json, sys, time
from augserve.bench.runner import BenchPoint, build_requests, point_scheduler_config
from augserve.predict.base import make_predictor
from augserve.profiles import load_profile
from augserve.sim.simulator import simulate
policy, rate, window = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
point = BenchPoint(policy=policy, rate=rate, workload="infercept-like", window=window, seed=1)
profile = load_profile(point.profile)
config = point_scheduler_config(point, profile)
requests = build_requests(point)
t0 = time.perf_counter()
res = simulate(requests, profile, config, window, 0.0, make_predictor("oracle"))
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": wall, "iterations": res.stats.iterations,
                  "sched_cpu_ms_per_iter": res.stats.sched_cpu_ms_per_iter}))
"""


def one(checkout: Path, policy: str, rate: float, window: float) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(checkout.resolve()))
    out = subprocess.run([sys.executable, "-P", "-c", _ONE, policy, str(rate), str(window)],
                         env=env, capture_output=True, text=True, check=True)  # fmt: skip
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, default=Path("."))
    ap.add_argument("--policies", default="vllm,infercept,mars,augserve,augserve-slo")
    ap.add_argument("--rate", type=float, default=3.0)
    ap.add_argument("--window", type=float, default=300.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    rows = []
    load0 = os.getloadavg()
    for policy in args.policies.split(","):
        runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
        for _ in range(args.repeat):
            for name in ("before", "after"):
                path = args.before if name == "before" else args.after
                runs[name].append(one(path, policy, args.rate, args.window))
        its = {n: {r["iterations"] for r in rs} for n, rs in runs.items()}
        assert its["before"] == its["after"] and len(its["before"]) == 1, its
        row: dict[str, Any] = {"policy": policy, "iterations": its["before"].pop()}
        for key in ("wall_s", "sched_cpu_ms_per_iter"):
            b = statistics.median(r[key] for r in runs["before"])
            a = statistics.median(r[key] for r in runs["after"])
            row[key] = {"before": b, "after": a, "ratio": a / b}
        rows.append(row)
        wall, cpu = row["wall_s"]["ratio"], row["sched_cpu_ms_per_iter"]["ratio"]
        print(f"{policy:>14} iters={row['iterations']} wall {wall:.3f}x cpu/iter {cpu:.3f}x")
    doc = {
        "command": " ".join(["python", *sys.argv]),
        "commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),  # fmt: skip
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load": {"start": load0, "end": os.getloadavg()},
        "cpu": platform.processor() or platform.machine(),
        "cpu_flags": _cpu_flags(),
        "note": "busy machine: other engineers' jobs ran on the 2 cores; ratios of "
        "alternating runs, medians of --repeat",
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return " ".join(f for f in flags if f.startswith(("avx", "sse4", "fma")))
    except OSError:
        pass
    return ""


if __name__ == "__main__":
    raise SystemExit(main())
