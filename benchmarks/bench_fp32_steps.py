"""Whole fp32 engine steps with the linear layers on MKL (`F.linear`) and on oneDNN
prepacked weights (`prepack.py`), side by side in one run (docs/engine-speed.md,
"Linear layers on prepacked weights").

The engine the agent-session comparisons serve (runs/calib/llama-small unless
--model, fp32, one torch thread unless --threads, 128 blocks of 32): prefill steps
of 256 and 1,024 fresh tokens and decode steps of 1, 4, 8 and 16 sequences whose
contexts are ~1,000 tokens. The two runners are built once each and alternated
round by round; the median of `--rounds` rounds of the best of `--repeats` runs.

    python -P benchmarks/bench_fp32_steps.py [--rounds 5] [--threads 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.model_runner import ModelRunner
from augserve.engine.profiler import BatchSpec, time_batch
from augserve.engine.resolve import resolve_model
from augserve.engine.runner_config import RunnerConfig
from augserve.engine.warmup import warm_up

ROOT = Path(__file__).resolve().parents[1]
CASES: dict[str, BatchSpec] = {
    "prefill 256": ([(256, 0)], []),
    "prefill 1024": ([(1024, 0)], []),
    "decode 1 x 1000": ([], [1000]),
    "decode 4 x 1000": ([], [1000] * 4),
    "decode 8 x 500": ([], [500] * 8),
    "decode 16 x 250": ([], [250] * 16),
}


def cpu_flags() -> list[str]:
    out = subprocess.run(["grep", "-m1", "flags", "/proc/cpuinfo"], capture_output=True,
                         text=True).stdout.split(":")[-1].split()  # fmt: skip
    return [f for f in out if "avx" in f or "amx" in f]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT / "runs/calib/llama-small"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    kv = KVCacheConfig(32, 128, None, 0)
    runners = {}
    for name, packed in (("mkl", False), ("onednn", True)):
        cfg = RunnerConfig(resolve_model(args.model), "float32", "cpu", kv, args.threads,
                           prepack=packed)  # fmt: skip
        runners[name] = ModelRunner(cfg)
        warm_up(runners[name])
    rows = []
    for case, spec in CASES.items():
        times: dict[str, list[float]] = {m: [] for m in runners}
        for r in range(args.rounds):
            order = list(runners) if r % 2 == 0 else list(runners)[::-1]
            for m in order:
                times[m].append(time_batch(runners[m], spec, args.repeats))
        mkl, dnn = (statistics.median(times[m]) for m in runners)
        rows.append({"case": case, "mkl_ms": mkl * 1e3, "onednn_ms": dnn * 1e3,
                     "speedup": mkl / dnn, "times_s": times})  # fmt: skip
        print(f"{case}: F.linear (MKL) {mkl * 1e3:.2f} ms, oneDNN prepacked "
              f"{dnn * 1e3:.2f} ms ({mkl / dnn:.2f}x)", flush=True)  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps({
            "command": " ".join([sys.executable, *sys.argv]), "load": os.getloadavg(),
            "threads": args.threads, "model": args.model, "cpu_flags": cpu_flags(),
            "rows": rows,
        }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
