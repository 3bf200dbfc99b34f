"""The `engine` backend of `augserve bench`: one point on the real engine, in real time.

The model is not part of a `BenchPoint`; it comes from the environment:
AUGSERVE_ENGINE_MODEL (model dir, required), AUGSERVE_ENGINE_DTYPE,
AUGSERVE_ENGINE_DEVICE, AUGSERVE_ENGINE_THREADS, AUGSERVE_ENGINE_TIME_SCALE
(wall seconds per trace second: it multiplies arrival times, call durations
and the window; default 1). `point.profile` should be a profile fitted on
that engine (`augserve profile`): it sizes the KV cache and is the
scheduler's latency model. Requests replay on the shared `TraceDriver`.
"""

from __future__ import annotations

import os
from dataclasses import fields
from typing import Any

from augserve.core.request import Request
from augserve.engine.builder import EngineArgs, build_engine
from augserve.engine.driver import Arrival, RealClock, TraceDriver
from augserve.engine.engine import LLMEngine
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tools import trace_prompt_ids

Row = dict[str, Any]
TRACE_PARAMS = SamplingParams(temperature=0.0, ignore_eos=True)


def trace_arrivals(engine: LLMEngine, requests: list[Request]) -> tuple[list[Arrival], int]:
    """Give trace requests prompt tokens (clipped to half the model length, so their
    outputs and returns fit); returns the arrivals and how many prompts were clipped."""
    limit = engine.max_model_len // 2
    clipped = 0
    for req in requests:
        if req.prompt_len > limit:
            clipped += 1
            req.prompt_len = req.num_tokens = limit
        req.opaque_tokens = True  # filler for a trace's unknown content: it shares no prefix
        req.token_ids = trace_prompt_ids(engine.tokenizer, req.prompt_text, req.prompt_len)
    arrivals = [Arrival(r.arrival_time, r, TRACE_PARAMS) for r in requests]
    return sorted(arrivals, key=lambda a: a.time), clipped


def engine_args(point: Any, profile: Any, config: Any) -> EngineArgs:
    threads = os.environ.get("AUGSERVE_ENGINE_THREADS")
    model = os.environ.get("AUGSERVE_ENGINE_MODEL")
    if not model:
        raise ValueError("engine backend: set AUGSERVE_ENGINE_MODEL to a model directory")
    return EngineArgs(
        model,
        config.policy,
        dtype=os.environ.get("AUGSERVE_ENGINE_DTYPE"),
        device=os.environ.get("AUGSERVE_ENGINE_DEVICE"),
        block_size=point.block_size,
        kv_cache_memory=profile.device_kv_bytes,
        num_host_blocks=profile.host_blocks(point.block_size),
        max_batch_tokens=config.max_batch_tokens,
        max_num_seqs=config.max_num_seqs,
        predictor=point.predictor,
        num_threads=int(threads) if threads else None,
        seed=point.seed,
        scheduler={
            f.name: getattr(config, f.name) for f in fields(config) if f.name not in _SET_ABOVE
        },
    )


# SchedulerConfig fields that EngineArgs sets itself (capacities come from the runner)
_SET_ABOVE = {
    "policy",
    "block_size",
    "max_batch_tokens",
    "max_num_seqs",
    "predictor",
    "num_device_blocks",
    "num_host_blocks",
}


def run_point(point: Any) -> list[Row]:
    """The bench runner's `engine` backend: one BenchPoint -> one summary row."""
    from augserve.bench.runner import build_requests, point_scheduler_config
    from augserve.core.metrics import SLOConfig, compute_metrics
    from augserve.profiles import load_profile

    scale = float(os.environ.get("AUGSERVE_ENGINE_TIME_SCALE", "1"))
    profile = load_profile(point.profile)
    config = point_scheduler_config(point, profile)
    engine = build_engine(engine_args(point, profile, config), latency=profile)
    requests = build_requests(point)
    arrivals, clipped = trace_arrivals(engine, requests)
    end = point.window + point.drain
    driver = TraceDriver(engine, RealClock(scale))
    stats = driver.run(arrivals, until=end)
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
        clipped_prompts=clipped,
        time_scale=scale,
    )
    return [row]
