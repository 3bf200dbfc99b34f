"""Engine overhead: time outside the model forward as a share of iteration time.

Runs `--batch` requests decoding together on the ~100M-parameter model (made
on the fly unless `--model` is given) and splits each `LLMEngine.step()`
into: scheduling, the model forward (+ LM head), and everything else (input
preparation, sampling, stop checks, scheduler bookkeeping, outputs).
Target: overhead <= 15% of iteration time at batch 16.

    python benchmarks/bench_engine_overhead.py [--model DIR] [--device cuda] [--dtype bf16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch

from augserve.core.config import SchedulerConfig
from augserve.engine.engine import LLMEngine
from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner
from augserve.engine.runner_config import RunnerConfig
from augserve.engine.sampling_params import SamplingParams


class Timer:
    def __init__(self, sync: bool) -> None:
        self.sync = sync
        self.total = 0.0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kw: Any) -> Any:
            self._sync()
            t = time.perf_counter()
            out = fn(*args, **kw)
            self._sync()
            self.total += time.perf_counter() - t
            return out

        return timed

    def _sync(self) -> None:
        if self.sync:
            torch.cuda.synchronize()


def run(args: argparse.Namespace) -> dict[str, Any]:
    model_dir = args.model
    if model_dir is None:
        model_dir = make_model("llama", "100m", tempfile.mkdtemp(prefix="augserve-100m-"), seed=0)
    kv = KVCacheConfig(16, args.num_device_blocks, None, 0)
    runner = ModelRunner(RunnerConfig(str(model_dir), args.dtype, args.device, kv, args.threads))
    engine = LLMEngine(runner, SchedulerConfig(policy=args.policy, max_batch_tokens=2048))
    sync = runner.device.type == "cuda"
    t_model, t_sched = Timer(sync), Timer(False)
    runner.model.forward = t_model.wrap(runner.model.forward)  # type: ignore[method-assign]
    runner.model.compute_logits = t_model.wrap(runner.model.compute_logits)  # type: ignore[method-assign]
    engine.scheduler.schedule = t_sched.wrap(engine.scheduler.schedule)  # type: ignore[method-assign]
    params = SamplingParams(
        temperature=args.temperature, ignore_eos=True, max_tokens=args.warmup + args.steps + 8
    )
    for i in range(args.batch):
        prompt = [3 + (i * 131 + j * 17) % (runner.vocab_size - 3) for j in range(args.prompt_len)]
        engine.add_request(f"r{i}", prompt, params)
    for _ in range(args.warmup):  # prefill, then a few decodes
        engine.step()
    shares, iters, models, scheds = [], [], [], []
    for _ in range(args.steps):
        t_model.total = t_sched.total = 0.0
        if sync:
            torch.cuda.synchronize()
        t = time.perf_counter()
        step = engine.step()
        if sync:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t
        assert step.scheduled is not None and len(step.scheduled.chunks) == args.batch
        iters.append(dt)
        models.append(t_model.total)
        scheds.append(t_sched.total)
        shares.append(1.0 - t_model.total / dt)
    it, mo = statistics.median(iters), statistics.median(models)
    return {
        "device": str(runner.device),
        "dtype": str(runner.dtype),
        "batch": args.batch,
        "threads": torch.get_num_threads(),
        "iteration_ms": it * 1e3,
        "model_ms": mo * 1e3,
        "schedule_ms": statistics.median(scheds) * 1e3,
        "overhead_share_median": statistics.median(shares),
        "overhead_share_total": 1.0 - sum(models) / sum(iters),
    }


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--model", default=None, help="model dir (default: make llama 100m in a temp dir)"
    )
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--policy", default="augserve")
    p.add_argument("--num-device-blocks", type=int, default=1024)
    res = run(p.parse_args())
    print(json.dumps(res, indent=2))
    share = res["overhead_share_median"]
    print(
        f"overhead outside the model forward: {share:.1%} of iteration time "
        f"({'OK' if share <= 0.15 else 'ABOVE'} the 15% target)"
    )


if __name__ == "__main__":
    main()
