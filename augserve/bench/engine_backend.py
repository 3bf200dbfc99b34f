"""The `engine` backend of `augserve bench`: one point on the real engine, in real time.

The model is not part of a `BenchPoint`; it comes from the environment:
AUGSERVE_ENGINE_MODEL (model dir, required), AUGSERVE_ENGINE_DTYPE,
AUGSERVE_ENGINE_DEVICE, AUGSERVE_ENGINE_THREADS, AUGSERVE_ENGINE_TIME_SCALE
(multiplies arrival times, call durations and the window; default 1).
`point.profile` should be a profile fitted on that engine (`augserve profile`):
it sizes the KV cache and is the scheduler's cost model.
"""

from __future__ import annotations

import os
from typing import Any

from augserve.engine.bench_backend import run_requests
from augserve.engine.engine import LLMEngine

Row = dict[str, Any]


def run_point(point: Any) -> list[Row]:
    """The bench runner's `engine` backend: one BenchPoint -> one summary row."""
    from augserve.bench.runner import build_requests, point_scheduler_config
    from augserve.core.metrics import SLOConfig, compute_metrics
    from augserve.engine.kv_cache import KVCacheConfig
    from augserve.engine.model_runner import ModelRunner, RunnerConfig
    from augserve.engine.tokenizer import Tokenizer
    from augserve.predict.base import make_predictor
    from augserve.profiles import load_profile

    model = os.environ.get("AUGSERVE_ENGINE_MODEL")
    if not model:
        raise ValueError("engine backend: set AUGSERVE_ENGINE_MODEL to a model directory")
    threads = os.environ.get("AUGSERVE_ENGINE_THREADS")
    scale = float(os.environ.get("AUGSERVE_ENGINE_TIME_SCALE", "1"))
    profile = load_profile(point.profile)
    kv = KVCacheConfig(
        point.block_size, None, profile.device_kv_bytes, profile.host_blocks(point.block_size)
    )
    runner = ModelRunner(
        RunnerConfig(
            model,
            os.environ.get("AUGSERVE_ENGINE_DTYPE"),
            os.environ.get("AUGSERVE_ENGINE_DEVICE"),
            kv,
            int(threads) if threads else None,
        )
    )
    config = point_scheduler_config(point, profile)
    engine = LLMEngine(
        runner, config, Tokenizer(model), profile, make_predictor(point.predictor, seed=point.seed)
    )
    end = point.window + point.drain
    requests, stats = run_requests(engine, build_requests(point), end, time_scale=scale)
    slo = SLOConfig.from_iteration_time(profile.decode_iter_time())
    summary = compute_metrics(requests, slo, start=0.0, end=end)
    row: Row = point.key()
    row.update(summary.to_dict())
    for name in ("goodput", "throughput_rps", "throughput_tps"):
        row[name] *= end / point.window
    row.update(
        num_offered=len(requests),
        engine_finished=sum(1 for r in requests if r.is_finished),
        iterations=stats.iterations,
        busy_share=stats.busy_time / max(stats.end_time, 1e-12),
        calls=stats.calls,
        clipped_prompts=stats.clipped_prompts,
        time_scale=scale,
    )
    return [row]
