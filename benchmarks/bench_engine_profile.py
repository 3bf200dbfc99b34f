"""Where a decode step's time goes: torch.profiler over batch-16 decode steps.

A ~110M random Llama (make-model --preset 100m unless --model-dir), fp32, 16
sequences whose KV cache holds a `--context`-token context (random K/V: the
values do not change the work), then `--steps` profiled decode steps. Shares:

- attention: the cache write and the paged decode kernel. Compiled, a decode step
  is one graph; inductor's kernel profiling names each fused kernel, and the
  attention ones are those fusing the block-table reductions (their names hold
  'amax' / 'index_copy'). Eager, the `paged_attention` ranges;
- linear: aten::mm / addmm (QKV, O, MLP, LM head);
- everything else: the rest of the step's wall time (fused norm / rotary / SiLU
  kernels, embedding, input preparation, sampler, Python).

    .venv/bin/python benchmarks/bench_engine_profile.py --threads 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import torch._inductor.config
from torch.profiler import ProfilerActivity, profile

from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner, SeqChunk
from augserve.engine.runner_config import RunnerConfig
from augserve.engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0)
LINEAR = {"aten::mm", "aten::addmm", "aten::bmm", "mkldnn::_linear_pointwise"}


def decode_steps(runner: ModelRunner, batch: int, context: int) -> Any:
    """A function running decode step i (position context + i) for `batch` sequences."""
    bs = runner.block_size
    need = (context + 64 + bs - 1) // bs
    tables = [list(range(i * need, (i + 1) * need)) for i in range(batch)]
    for t in runner.kv.k_caches + runner.kv.v_caches:
        t.normal_()

    def step(i: int) -> None:
        chunks = [SeqChunk(f"s{j}", [5 + j], context + i, tables[j], True, GREEDY)
                  for j in range(batch)]  # fmt: skip
        runner.execute(chunks)

    return step


def is_attention_kernel(name: str) -> bool:
    return name.startswith("graph_") and ("amax" in name or "index_copy" in name)


def shares(prof: Any, wall: float) -> dict[str, float]:
    """Seconds of attention, linear and the rest, from the profiler's events."""
    attn = lin = 0.0
    ranges = []
    for e in prof.events():
        if e.name == "paged_attention":
            attn += e.cpu_time_total / 1e6
            ranges.append((e.time_range.start, e.time_range.end))
        elif is_attention_kernel(e.name):
            attn += e.self_cpu_time_total / 1e6
    for e in prof.events():
        if e.name in LINEAR and not any(s <= e.time_range.start < t for s, t in ranges):
            lin += e.self_cpu_time_total / 1e6
    return {"attention": attn, "linear": lin, "other": max(0.0, wall - attn - lin)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=None)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=520)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--no-compile", action="store_true", help="the eager reference path")
    a = p.parse_args()
    torch._inductor.config.cpp.enable_kernel_profile = True  # name each fused kernel
    model_dir = a.model_dir or make_model("llama", "100m", Path(tempfile.mkdtemp()) / "llama100m")
    blocks = a.batch * ((a.context + 64) // a.block_size + 2)
    kv = KVCacheConfig(a.block_size, num_device_blocks=blocks)
    runner = ModelRunner(
        RunnerConfig(str(model_dir), "fp32", "cpu", kv, a.threads, compile=not a.no_compile)
    )
    step = decode_steps(runner, a.batch, a.context)
    for i in range(3):  # warm-up (and compilation)
        step(i)
    walls = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(a.steps):
            t0 = time.perf_counter()
            step(3 + i)
            walls.append(time.perf_counter() - t0)
    wall = sum(walls)
    sh = shares(prof, wall)
    print(f"decode step, batch {a.batch}, context ~{a.context}, fp32, {a.threads} threads, "
          f"attention={runner.attention_backend}: {1e3 * wall / a.steps:.1f} ms/step "
          f"(profiled; min {1e3 * min(walls):.1f})")  # fmt: skip
    for k, v in sh.items():
        print(f"  {k:<10} {1e3 * v / a.steps:7.1f} ms  {v / wall:6.1%}")
    print(
        prof.key_averages().table(
            sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=90
        )
    )


if __name__ == "__main__":
    main()
