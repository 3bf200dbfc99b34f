"""Decode steps of the quantized GGUF path, two source trees side by side (docs/engine-quant.md).

Each tree (`--tree NAME=PATH`, a checkout of augserve: the code before and after a change)
runs in its own subprocess with PYTHONPATH=PATH (`PATH,dense`: the GGUF file dequantized
to bf16 instead, the path `--dtype bf16` loads; `PATH,torch`: quantized on torch's int4 /
int8 kernels, AUGSERVE_NATIVE=0, instead of the native ones), rounds alternated
(ABBA...), best of the rounds per tree: the time of a decode step of 1 and of 8
sequences, and of a 512-token prefill (CPU and wall time), (ModelRunner.execute,
greedy, contexts of ~100 tokens), in process, no server: wall time and the process's CPU
time (on a machine shared with other jobs the CPU time of a 1-thread run is the steadier
measure of the work a step does: waiting for a core is not in it). The ratio of the
trees' best times is the figure; the absolute times on a shared machine mean little
(load recorded).

    python benchmarks/bench_quant_decode.py --tree before=/tmp/base --tree after=. \
        [--model smollm2|PATH.gguf] [--rounds 4] [--steps 40] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CHILD = r"""
import json, os, sys, time, torch
from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.model_runner import ModelRunner, SeqChunk
from augserve.engine.runner_config import RunnerConfig
from augserve.engine.sampling_params import SamplingParams
model, threads, steps, dense = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
if model == "smollm2":
    from augserve.engine.smollm2 import smollm2_model_dir
    model = str(smollm2_model_dir())
else:
    from augserve.engine.resolve import resolve_model
    model = str(resolve_model(model))
kv = KVCacheConfig(block_size=16, num_device_blocks=8 * 16 + 40)
t0 = time.perf_counter()
dtype = "bf16" if dense else None
r = ModelRunner(RunnerConfig(model, dtype, "cpu", kv, threads, compile=False, quantize=not dense))
load_s = time.perf_counter() - t0
greedy = SamplingParams(temperature=0.0)
out = {"load_s": load_s}
for b in (1, 8):
    tables = [list(range(16 * i, 16 * i + 16)) for i in range(b)]
    pos = []
    for i in range(b):
        ids = [(31 * i + 7 * k) % 1000 + 10 for k in range(96 + i)]
        r.execute([SeqChunk(f"s{i}", ids, 0, tables[i], True, greedy)])
        pos.append(len(ids))
    def step():
        r.execute([SeqChunk(f"s{i}", [5 + i], pos[i], tables[i], True, greedy) for i in range(b)])
        for i in range(b):
            pos[i] += 1
    for _ in range(5):
        step()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    out[f"step_ms_b{b}"] = 1e3 * (time.perf_counter() - t0) / steps
    out[f"cpu_ms_b{b}"] = 1e3 * (time.process_time() - c0) / steps
ids = [(13 * k) % 1000 + 10 for k in range(512)]
best = float("inf")
for _ in range(2):
    c0 = time.process_time()
    r.execute([SeqChunk("p", ids, 0, list(range(32, 64)), True, greedy)])
    best = min(best, time.process_time() - c0)
out["cpu_ms_prefill512"] = 1e3 * best
best = float("inf")
for _ in range(2):
    t0 = time.perf_counter()
    r.execute([SeqChunk("p", ids, 0, list(range(32, 64)), True, greedy)])
    best = min(best, time.perf_counter() - t0)
out["wall_ms_prefill512"] = 1e3 * best
print("RESULT " + json.dumps(out))
"""


def run_tree(path: str, model: str, threads: int, steps: int) -> dict[str, float]:
    path, _, mode = path.partition(",")
    env = {**os.environ, "PYTHONPATH": str(Path(path).resolve())}
    env.pop("AUGSERVE_QUANT", None)
    if mode == "torch":  # the quantized weights on torch's kernels, not the native ones
        env["AUGSERVE_NATIVE"] = "0"
    p = subprocess.run(
        # -P: `python -c` would put the working directory first on sys.path, ahead of
        # PYTHONPATH, and every tree would run the checkout the bench was started from
        [sys.executable, "-P", "-c", CHILD, model, str(threads), str(steps),
         str(int(mode == "dense"))],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            got: dict[str, float] = json.loads(line[7:])
            return got
    raise RuntimeError(f"tree {path} failed:\n{p.stderr[-3000:]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", action="append", required=True, help="NAME=PATH")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="JSON result file")
    a = p.parse_args()
    trees = [t.split("=", 1) for t in a.tree]
    best: dict[str, dict[str, float]] = {}
    loads = [os.getloadavg()]
    for rnd in range(a.rounds):
        order = trees if rnd % 2 == 0 else trees[::-1]
        for name, path in order:
            got = run_tree(path, a.model, a.threads, a.steps)
            loads.append(os.getloadavg())
            print(name, "round", rnd, {k: round(v, 2) for k, v in got.items()}, flush=True)
            old = best.setdefault(name, got)
            for k, v in got.items():
                old[k] = min(old[k], v)
    first = trees[0][0]
    summary: dict[str, Any] = {"best": best, "loadavg": loads}
    for name, _ in trees[1:]:
        for k in best[first]:
            if k != "load_s":
                summary[f"speedup_{k}_{name}_vs_{first}"] = best[first][k] / best[name][k]
    print(json.dumps(summary, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps({"command": " ".join(sys.argv), **summary}, indent=1))


if __name__ == "__main__":
    main()
