"""CPU decode attention three ways, side by side in one run (docs/engine-quant.md,
"Decode attention on the CPU" and "... on the native kernels").

The engine the sessions benchmarks serve (runs/calib/llama-small unless --model, fp32,
one torch thread unless --threads, 128 blocks of 32): decode steps whose sequences have
the contexts below, timed with the torch path's `attention_cpu.SPLIT_COLUMNS` at 10**9
(one batch padded to the longest context), at its default (groups of similar length),
and on the native kernel (the cache read in place; `native/attention.py`), the modes
rotated round by round; the median of `--rounds` rounds of `--steps` steps each.

    python -P benchmarks/bench_decode_groups.py [--rounds 5] [--threads 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from augserve.engine import attention_cpu
from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.model_runner import ModelRunner
from augserve.engine.native import attention as native_attention
from augserve.engine.profiler import BatchSpec, batch_chunks
from augserve.engine.resolve import resolve_model
from augserve.engine.runner_config import RunnerConfig
from augserve.engine.warmup import warm_up

ROOT = Path(__file__).resolve().parents[1]
rng = random.Random(0)
CASES: dict[str, list[int]] = {
    "8 x 1500 (equal)": [1500] * 8,
    "8 of 200-1900": sorted(rng.randint(200, 1900) for _ in range(8)),
    "16 of 200-1900": sorted(rng.randint(200, 1900) for _ in range(16)),
    "32 of 100-1000": sorted(rng.randint(100, 1000) for _ in range(32)),
    "1 x 1900 + 15 x 100": [1900] + [100] * 15,
}


def time_steps(runner: ModelRunner, spec: BatchSpec, steps: int) -> float:
    chunks = batch_chunks(runner, *spec)
    runner.execute(chunks)
    t = time.perf_counter()
    for _ in range(steps):
        runner.execute(chunks)
    return (time.perf_counter() - t) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "runs/calib/llama-small"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    kv = KVCacheConfig(32, 1024, None, 0)  # room for 32 x 1,000 tokens without wrapping
    cfg = RunnerConfig(resolve_model(args.model), "float32", "cpu", kv, args.threads)
    runner = ModelRunner(cfg)
    warm_up(runner)
    default = attention_cpu.SPLIT_COLUMNS
    rows = []
    for name, ctxs in CASES.items():
        spec: BatchSpec = ([], ctxs)
        modes = ["one batch", "groups", "native"]
        times: dict[str, list[float]] = {m: [] for m in modes}
        for r in range(args.rounds):
            for mode in modes[r % 3 :] + modes[: r % 3]:
                attention_cpu.SPLIT_COLUMNS = 10**9 if mode == "one batch" else default
                native_attention.ENABLED[0] = mode == "native"
                times[mode].append(time_steps(runner, spec, args.steps))
        attention_cpu.SPLIT_COLUMNS, native_attention.ENABLED[0] = default, True
        one, grp, nat = (statistics.median(times[m]) for m in modes)
        groups = len(attention_cpu.groups_by_length(ctxs))
        rows.append({"case": name, "contexts": ctxs, "groups": groups,
                     "one_batch_ms": one * 1e3, "groups_ms": grp * 1e3, "native_ms": nat * 1e3,
                     "speedup": one / grp, "native_vs_groups": grp / nat,
                     "times_s": times})  # fmt: skip
        print(f"{name}: one batch {one * 1e3:.1f} ms, {groups} groups {grp * 1e3:.1f} ms "
              f"({one / grp:.2f}x), native {nat * 1e3:.1f} ms ({grp / nat:.2f}x groups)",
              flush=True)  # fmt: skip
    if args.out:
        flags = subprocess.run(["grep", "-m1", "flags", "/proc/cpuinfo"], capture_output=True,
                               text=True).stdout.split(":")[-1].split()  # fmt: skip
        Path(args.out).write_text(json.dumps({
            "command": " ".join([sys.executable, *sys.argv]), "load": os.getloadavg(),
            "threads": args.threads, "native_isa": native_attention.isa_or_none(),
            "split_columns": default, "cpu_flags": [f for f in flags if "avx" in f or "amx" in f],
            "rows": rows,
        }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
