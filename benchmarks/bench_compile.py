"""Eager against compiled SmolLM2 on the CPU: what `torch.compile` costs and buys.

A first process holds an eager and a compiled runner side by side on an empty
inductor cache: each shape (decode at batch 1 and 8, a 128-token prefill) runs once
in each (the compiled first call is where the compile happens), then their steps
alternate `--reps` times, so both see the same load (medians, and their ratio). A
second process on the now filled cache times the compiled first calls again (a
later start: inductor's FX graph cache hits, dynamo still traces).

    .venv/bin/python benchmarks/bench_compile.py --threads 2 --out docs/data/compile.json

The machine may be busy: the load average is recorded with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from augserve.bench.report import git_commit

SHAPES: dict[str, tuple[list[tuple[int, int]], list[int]]] = {
    "decode_b1": ([], [64]),
    "decode_b8": ([], [64] * 8),
    "prefill_128": ([(128, 0)], []),
}


def _runner(compiled: bool, dtype: str | None, threads: int) -> Any:
    from augserve.engine.model_runner import ModelRunner
    from augserve.engine.runner_config import RunnerConfig
    from augserve.engine.smollm2 import smollm2_model_dir

    cfg = RunnerConfig(str(smollm2_model_dir()), dtype, "cpu", num_threads=threads,
                       compile=compiled)  # fmt: skip
    return ModelRunner(cfg)


def _timed(runner: Any, chunks: Any) -> float:
    t = time.perf_counter()
    runner.execute(chunks)
    return time.perf_counter() - t


def child(mode: str, dtype: str | None, threads: int, reps: int) -> dict[str, Any]:
    """One process (run with --child). "side-by-side": an eager and a compiled runner
    in this process, each shape's first call timed (the compile), then their steps
    alternated `reps` times (so both see the same load; medians). "first-calls": a
    compiled runner's first calls only (a later start, on the filled cache)."""
    from augserve.engine.profiler import batch_chunks

    row: dict[str, Any] = {"mode": mode}
    t0 = time.perf_counter()
    comp = _runner(True, dtype, threads)
    row["build_s"] = time.perf_counter() - t0
    eager = _runner(False, dtype, threads) if mode == "side-by-side" else None
    for name, spec in SHAPES.items():
        c_chunks = batch_chunks(comp, *spec)
        row[f"{name}_compiled_first_s"] = _timed(comp, c_chunks)
        if eager is None:
            continue
        e_chunks = batch_chunks(eager, *spec)
        row[f"{name}_eager_first_s"] = _timed(eager, e_chunks)
        e_times, c_times = [], []
        for _ in range(reps):
            e_times.append(_timed(eager, e_chunks))
            c_times.append(_timed(comp, c_chunks))
        row[f"{name}_eager_ms"] = 1e3 * statistics.median(e_times)
        row[f"{name}_compiled_ms"] = 1e3 * statistics.median(c_times)
        row[f"{name}_speedup"] = statistics.median(e_times) / statistics.median(c_times)
    return row


def run_child(mode: str, args: argparse.Namespace, cache: Path) -> dict[str, Any]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    cmd = [sys.executable, __file__, "--child", mode, "--threads", str(args.threads)]
    cmd += ["--reps", str(args.reps)] + (["--dtype", args.dtype] if args.dtype else [])
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    row: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    row["load_avg_1min"] = os.getloadavg()[0]
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--dtype", default=None, help="default: the engine's (bf16)")
    p.add_argument("--rounds", type=int, default=1, help="alternations of the modes")
    p.add_argument("--out", default=None, help="JSON file for the results")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.dtype, args.threads, args.reps)))
        return 0
    rows = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            cache = Path(tmp)
            for mode in ("side-by-side", "first-calls"):
                rows.append(run_child(mode, args, cache))
                print(json.dumps(rows[-1]), flush=True)
    meta = {
        "command": " ".join(["python", *sys.argv]),
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_avg": os.getloadavg(),
        "machine": [platform.machine(), platform.processor(), os.cpu_count()],
        "cpu_flags": _cpu_flags(),
        "note": "a shared machine (8 engineers on 2 cores): timings are from a busy machine",
        "model": "SmolLM2-135M-Instruct (GGUF Q4_1, dequantized)",
        "dtype": args.dtype or "bf16",
        "threads": args.threads,
    }
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    return 0


def _cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                keep = ("avx", "amx", "fma", "sse4")
                return sorted({f for f in line.split(":")[1].split() if f.startswith(keep)})
    except OSError:
        pass
    return []


if __name__ == "__main__":
    sys.exit(main())
