"""The `engine` backend of `augserve bench`: one point on the real engine, in real time.

`run_requests` replays live `Request`s (arrival times in seconds from the
start, segment plans from the trace) against an `LLMEngine`: each request
arrives at its time, its calls are scripted (they last the trace's duration
and return its number of filler tokens), and serving stops at `until`.
`run_point` builds the engine and the arrival stream of a `BenchPoint` and
summarizes it as one row, like the simulator backend.

The model is not part of a `BenchPoint`; it comes from the environment:
AUGSERVE_ENGINE_MODEL (model dir, required), AUGSERVE_ENGINE_DTYPE,
AUGSERVE_ENGINE_DEVICE, AUGSERVE_ENGINE_THREADS, AUGSERVE_ENGINE_TIME_SCALE
(multiplies arrival times, call durations and the window; default 1).
`point.profile` should be a profile fitted on that engine (`augserve profile`):
it sizes the KV cache and is the scheduler's cost model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from augserve.core.request import Request
from augserve.engine.engine import LLMEngine
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tools import CallTimers, trace_prompt_ids

Row = dict[str, Any]


@dataclass
class EngineRunStats:
    iterations: int = 0
    busy_time: float = 0.0
    end_time: float = 0.0
    calls: int = 0
    clipped_prompts: int = 0
    step_times: list[float] = field(default_factory=list)


def run_requests(
    engine: LLMEngine,
    requests: Sequence[Request],
    until: float,
    params: SamplingParams | None = None,
    time_scale: float = 1.0,
) -> tuple[list[Request], EngineRunStats]:
    """Serve `requests` in real time until every one finished or `until` seconds
    passed. Times on the requests are engine-clock seconds since the start (scaled
    back by `time_scale`). Returns the requests (unfinished ones keep their state)."""
    params = params or SamplingParams(temperature=0.0, ignore_eos=True)
    t0 = time.perf_counter()
    engine.clock = lambda: (time.perf_counter() - t0) / time_scale
    engine.stream = False
    engine.call_time_scale = 1.0  # the clock itself is scaled: calls last trace seconds
    stats, timers = EngineRunStats(), CallTimers()
    pending = sorted(requests, key=lambda r: r.arrival_time)
    limit = engine.max_model_len // 2
    k = 0
    while engine.clock() < until and (k < len(pending) or engine.has_unfinished()):
        now = engine.clock()
        while k < len(pending) and pending[k].arrival_time <= now:
            req = pending[k]
            k += 1
            if req.prompt_len > limit:
                stats.clipped_prompts += 1
                req.prompt_len = req.num_tokens = limit
            req.token_ids = trace_prompt_ids(engine.tokenizer, req.prompt_text, req.prompt_len)
            engine.add(req, params, now=req.arrival_time)
        for call in timers.due(now):
            assert call.scripted is not None
            engine.resume(call.request_id, list(call.scripted.token_ids))
        if not _step(engine, timers, stats, time_scale):
            _sleep_until(
                engine,
                timers,
                pending[k].arrival_time if k < len(pending) else None,
                until,
                time_scale,
            )
    stats.end_time = engine.clock()
    return list(requests), stats


def _step(engine: LLMEngine, timers: CallTimers, stats: EngineRunStats, scale: float) -> bool:
    """One engine step; False when it did nothing (everyone is in a call or idle)."""
    if not engine.has_unfinished():
        return False
    t = time.perf_counter()
    step = engine.step()
    for call in step.calls:
        timers.start(call)
        stats.calls += 1
    if step.idle:
        return False
    dt = time.perf_counter() - t
    stats.iterations += 1
    stats.busy_time += dt / scale
    stats.step_times.append(dt)
    return True


def _sleep_until(
    engine: LLMEngine, timers: CallTimers, arrival: float | None, until: float, scale: float
) -> None:
    """Sleep (wall seconds) until the next call return, arrival or the end (clock seconds)."""
    events = [t for t in (until, timers.next_time(), arrival) if t is not None]
    wait = (min(events) - engine.clock()) * scale
    time.sleep(min(max(0.0, wait), 0.05))
