"""The offline API, after vLLM's `LLM`:

    from augserve import LLM, SamplingParams
    llm = LLM("models/tiny", policy="augserve", dtype="fp32")
    outs = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=16))

`run_trace` replays a trace's requests with scripted calls in real time (the
call lasts the trace's duration and returns its number of filler tokens).
With a `tool_parser` and `tool_executor`, `generate` runs model-driven calls
through `AsyncLLMEngine`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from augserve.core.config import SchedulerConfig
from augserve.core.cost import CostModel, LatencyProfile
from augserve.core.request import Request, Segment
from augserve.engine.async_engine import AsyncLLMEngine
from augserve.engine.engine import LLMEngine, RequestOutput
from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.model_runner import ModelRunner, RunnerConfig
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tokenizer import Tokenizer
from augserve.engine.tools import CallTimers, ToolCallParser, ToolExecutor, trace_prompt_ids

__all__ = ["LLM", "RequestOutput", "SamplingParams"]

Prompt = str | Sequence[int]


class LLM:
    """A model, a paged KV cache, a scheduler and a sync loop over them.

    KV memory: `kv_cache_memory` (bytes) or `num_device_blocks`; host swap pool:
    `swap_space` (bytes) or `num_host_blocks`. Any other `SchedulerConfig`
    field can be passed as a keyword (e.g. `max_batch_tokens=256`).
    `profile`: a LatencyProfile or a JSON path (`augserve profile`) for the
    scheduler's cost model.
    """

    def __init__(
        self,
        model: str | Path,
        policy: str = "augserve",
        dtype: str | None = None,
        kv_cache_memory: int | None = None,
        num_device_blocks: int | None = None,
        swap_space: int | None = None,
        num_host_blocks: int | None = None,
        block_size: int = 16,
        device: str | None = None,
        num_threads: int | None = None,
        profile: str | Path | CostModel | None = None,
        tool_parser: ToolCallParser | None = None,
        tool_executor: ToolExecutor | None = None,
        **scheduler_kwargs: Any,
    ) -> None:
        if kv_cache_memory is None and num_device_blocks is None:
            num_device_blocks = 512
        kv = KVCacheConfig(block_size, num_device_blocks, kv_cache_memory, num_host_blocks or 0)
        runner = ModelRunner(RunnerConfig(str(model), dtype, device, kv, num_threads))
        if swap_space:  # the host pool is sized from the model's KV bytes: rebuild once
            host = swap_space // (runner.kv_bytes_per_token * block_size)
            kv = KVCacheConfig(block_size, runner.num_device_blocks, None, host)
            runner = ModelRunner(RunnerConfig(str(model), dtype, device, kv, num_threads))
        config = SchedulerConfig(policy=policy, **scheduler_kwargs)
        cost = _load_cost(profile)
        tokenizer = Tokenizer(model)
        self.engine = LLMEngine(runner, config, tokenizer, cost, tool_parser=tool_parser)
        self.tool_executor = tool_executor
        self._ids = 0

    @property
    def tokenizer(self) -> Tokenizer:
        assert self.engine.tokenizer is not None
        return self.engine.tokenizer

    # --- plain generation -----------------------------------------------------------
    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Generate for each prompt (text or token ids); outputs in prompt order."""
        plist = _as_prompt_list(prompts)
        params = _as_params_list(sampling_params, len(plist))
        if self.engine.tool_parser is not None and self.tool_executor is not None:
            return asyncio.run(self._agenerate(plist, params))
        ids: list[str] = []
        try:
            for p, sp in zip(plist, params, strict=True):
                ids.append(self._add(p, sp))
        except ValueError:
            for rid in ids:  # a bad prompt rejects the whole batch
                self.engine.abort(rid)
            self.engine.step()  # report (and forget) the aborted requests
            raise
        return self._run(ids, [])

    async def _agenerate(
        self, prompts: list[Prompt], params: list[SamplingParams]
    ) -> list[RequestOutput]:
        aengine = AsyncLLMEngine(self.engine, self.tool_executor)
        self.engine.stream = True

        async def one(prompt: Prompt, sp: SamplingParams) -> RequestOutput:
            last = None
            async for out in aengine.generate(prompt, sp, self._next_id()):
                last = out
            assert last is not None
            return last

        try:
            return list(
                await asyncio.gather(*(one(p, sp) for p, sp in zip(prompts, params, strict=True)))
            )
        finally:
            await aengine.shutdown()

    # --- scripted traces -----------------------------------------------------------
    def run_trace(
        self,
        requests: Sequence[Any],
        arrival_times: Sequence[float] | None = None,
        sampling_params: SamplingParams | None = None,
        time_scale: float = 1.0,
    ) -> list[RequestOutput]:
        """Replay trace requests (anything with `prompt_len`, `segments` and optionally
        `prompt_text`, `request_id`, e.g. `TraceRequest`) with scripted calls in real
        time. Arrival times and call durations are multiplied by `time_scale`.
        Greedy and ignore_eos by default: lengths follow the plan."""
        sp = sampling_params or SamplingParams(temperature=0.0, ignore_eos=True)
        arrivals = list(arrival_times) if arrival_times is not None else [0.0] * len(requests)
        if len(arrivals) != len(requests):
            raise ValueError("run_trace: arrival_times must match requests")
        self.engine.call_time_scale = time_scale
        pending = sorted(
            (
                (t * time_scale, i, r)
                for i, (t, r) in enumerate(zip(arrivals, requests, strict=True))
            ),
            key=lambda x: (x[0], x[1]),
        )
        ids = [getattr(r, "request_id", None) or self._next_id() for _, _, r in pending]
        order = {rid: k for k, rid in enumerate(ids)}
        plan = [
            (t, rid, self.trace_prompt(r), list(r.segments))
            for (t, _, r), rid in zip(pending, ids, strict=True)
        ]
        outs = self._run(ids, plan, sp)
        return sorted(outs, key=lambda o: order[o.request_id])

    def trace_prompt(self, req: Any) -> list[int]:
        """`prompt_len` token ids: the prompt text's tokens, repeated or cut to length."""
        return trace_prompt_ids(
            self.tokenizer, getattr(req, "prompt_text", None), int(req.prompt_len)
        )

    # --- the sync loop -------------------------------------------------------------
    def _add(
        self,
        prompt: Prompt,
        sp: SamplingParams,
        segments: list[Segment] | None = None,
        rid: str | None = None,
    ) -> str:
        rid = rid or self._next_id()
        self.engine.add_request(rid, prompt, sp, segments)
        return rid

    def _run(
        self,
        ids: list[str],
        plan: list[tuple[float, str, list[int], list[Segment]]],
        sp: SamplingParams | None = None,
    ) -> list[RequestOutput]:
        engine, timers = self.engine, CallTimers()
        engine.stream = False  # only final outputs are returned
        done: dict[str, RequestOutput] = {}
        t0 = engine.clock()
        plan = list(plan)
        idle = 0
        while engine.has_unfinished() or plan:
            now = engine.clock()
            while plan and t0 + plan[0][0] <= now:
                _, rid, prompt, segs = plan.pop(0)
                self._add(prompt, sp or SamplingParams(), segs, rid)
            for call in timers.due(now):
                assert call.scripted is not None
                engine.resume(call.request_id, list(call.scripted.token_ids))
            step = engine.step() if engine.has_unfinished() else None
            if step is not None:
                for call in step.calls:
                    timers.start(call)
                for out in step.outputs:
                    if out.finished:
                        done[out.request_id] = out
                if not step.idle:
                    idle = 0
                    continue
            idle += 1
            self._wait(timers, [t0 + p[0] for p in plan[:1]], idle)
        return [done[rid] for rid in ids if rid in done]

    def _wait(self, timers: CallTimers, arrivals: list[float], idle: int) -> None:
        events = [t for t in [timers.next_time(), *arrivals] if t is not None]
        if not events:
            if idle > 100:  # no forward, no call, no arrival: nothing will ever change
                raise RuntimeError("engine is stuck: requests can neither run nor resume")
            return
        time.sleep(max(0.0, min(events) - self.engine.clock()))

    def _next_id(self) -> str:
        self._ids += 1
        return f"req-{self._ids}"


def _load_cost(profile: str | Path | CostModel | None) -> CostModel | None:
    if profile is None or not isinstance(profile, str | Path):
        return profile
    from augserve.profiles import load_profile

    return load_profile(profile)


def _as_prompt_list(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    if isinstance(prompts, str):
        return [prompts]
    items = list(prompts)
    if items and all(isinstance(t, int) for t in items):
        return [[int(t) for t in items]]  # type: ignore[arg-type]  # one prompt of token ids
    return [p for p in items if not isinstance(p, int)]


def _as_params_list(
    params: SamplingParams | Sequence[SamplingParams] | None, n: int
) -> list[SamplingParams]:
    if params is None or isinstance(params, SamplingParams):
        return [params or SamplingParams()] * n
    plist = list(params)
    if len(plist) != n:
        raise ValueError(f"got {len(plist)} sampling params for {n} prompts")
    return plist


__all__ += ["LatencyProfile", "Request"]
