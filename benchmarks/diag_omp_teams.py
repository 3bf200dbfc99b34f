"""Diagnostic: torch's CPU threads when two threads run a model (docs/engine-quant.md,
"One OpenMP team"). Builds quantized SmolLM2 with 2 torch threads and times 40 batch-1
decode steps: `thread` builds and steps it on one worker thread; `main` builds and
steps it on the main thread, then steps it on a second thread, then on main again
(libgomp then holds two teams and throttles its spinning: every step gets slower).

    python benchmarks/diag_omp_teams.py thread
    python benchmarks/diag_omp_teams.py main
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.model_runner import ModelRunner, SeqChunk
from augserve.engine.runner_config import RunnerConfig
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.smollm2 import smollm2_model_dir

GREEDY = SamplingParams(temperature=0.0)
TABLE = list(range(16))
state: dict[str, Any] = {}


def build() -> None:
    kv = KVCacheConfig(block_size=16, num_device_blocks=200)
    cfg = RunnerConfig(str(smollm2_model_dir()), None, "cpu", kv, 2, compile=False, quantize=True)
    state["runner"] = runner = ModelRunner(cfg)
    ids = [(7 * k) % 1000 + 10 for k in range(96)]
    runner.execute([SeqChunk("s", ids, 0, TABLE, True, GREEDY)])
    state["pos"] = len(ids)


def steps(n: int = 40) -> float:
    """Milliseconds per decode step over `n` steps."""
    runner, t0 = state["runner"], time.perf_counter()
    for _ in range(n):
        runner.execute([SeqChunk("s", [5], state["pos"], TABLE, True, GREEDY)])
        state["pos"] += 1
    return (time.perf_counter() - t0) / n * 1e3


def main() -> None:
    pool = ThreadPoolExecutor(1)
    if sys.argv[1:] == ["thread"]:
        pool.submit(build).result()
        pool.submit(steps, 5).result()
        print(f"built and stepped on one thread: {pool.submit(steps).result():.1f} ms")
        return
    build()
    steps(5)
    print(f"on main: {steps():.1f} ms")
    pool.submit(steps, 5).result()
    print(f"then on a second thread: {pool.submit(steps).result():.1f} ms")
    print(f"then on main again: {steps():.1f} ms")


if __name__ == "__main__":
    main()
