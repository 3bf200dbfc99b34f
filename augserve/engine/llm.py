"""The offline API, after vLLM's `LLM`:

    from augserve import LLM, SamplingParams
    llm = LLM("models/tiny", policy="augserve", dtype="fp32")
    outs = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=16))
    print(outs[0].outputs[0].text)
    outs = llm.chat([{"role": "user", "content": "Hi"}])

`run_trace` replays a trace's requests with scripted calls in real time (the
call lasts the trace's duration and returns its number of filler tokens).
With a `tool_parser` (and a `tool_executor` for the tools the model may call
on this side), `generate` runs model-driven calls through `AsyncLLMEngine`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from augserve.core.latency import LatencyModel
from augserve.core.request import Segment
from augserve.engine.async_engine import AsyncLLMEngine
from augserve.engine.builder import EngineArgs, build_engine, load_latency
from augserve.engine.driver import Arrival, RealClock, TraceDriver
from augserve.engine.outputs import CompletionOutput, RequestOutput, merge_samples
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tokenizer import Tokenizer
from augserve.engine.tools import ToolCallParser, ToolExecutor, ToolSession, trace_prompt_ids

__all__ = ["LLM", "CompletionOutput", "RequestOutput", "SamplingParams"]

Prompt = str | Sequence[int]
Message = dict[str, Any]
_ENGINE_ARGS = {f.name for f in fields(EngineArgs)}


class LLM:
    """A model, a paged KV cache, a scheduler and a loop over them.

    Keywords are `EngineArgs` fields (KV memory: `kv_cache_memory` bytes or
    `num_device_blocks`; host swap pool: `swap_space` bytes or
    `num_host_blocks`; `max_batch_tokens`, `predictor`, ...); any other
    `SchedulerConfig` field can be passed too (e.g. `beta_high=1.0`).
    `profile`: a LatencyProfile, a shipped profile name or a JSON path
    (`augserve profile`) for the scheduler's latency model.
    """

    def __init__(
        self,
        model: str | Path,
        policy: str = "augserve",
        profile: str | Path | LatencyModel | None = None,
        tool_parser: ToolCallParser | None = None,
        tool_executor: ToolExecutor | None = None,
        **kwargs: Any,
    ) -> None:
        engine_kw = {k: v for k, v in kwargs.items() if k in _ENGINE_ARGS}
        scheduler_kw = {k: v for k, v in kwargs.items() if k not in _ENGINE_ARGS}
        engine_kw.setdefault("max_batch_tokens", 2048)
        args = EngineArgs(str(model), policy, scheduler=scheduler_kw, **engine_kw)
        self.engine = build_engine(args, latency=load_latency(profile))
        self.tools = ToolSession(tool_parser, tool_executor) if tool_parser else None
        self._ids = 0

    @property
    def tokenizer(self) -> Tokenizer:
        assert self.engine.tokenizer is not None
        return self.engine.tokenizer

    # --- generation -------------------------------------------------------------------
    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Generate for each prompt (text or token ids); outputs in prompt order, each
        with `n` completions in `outputs`."""
        plist = _as_prompt_list(prompts)
        params = _as_params_list(sampling_params, len(plist))
        samples = [[sp.sample(i) for i in range(sp.n)] for sp in params]
        ids = [[self._next_id() for _ in s] for s in samples]
        flat = [
            (rid, p, sp)
            for p, rids, sps in zip(plist, ids, samples, strict=True)
            for rid, sp in zip(rids, sps, strict=True)
        ]
        if self.tools is not None:
            done = asyncio.run(self._agenerate(flat))
        else:
            done = self._run([(0.0, rid, p, sp, None) for rid, p, sp in flat])
        return [
            done[rids[0]] if len(rids) == 1 else merge_samples(rids[0], [done[r] for r in rids])
            for rids in ids
        ]

    def chat(
        self,
        messages: Sequence[Message] | Sequence[Sequence[Message]],
        sampling_params: SamplingParams | None = None,
        add_generation_prompt: bool = True,
    ) -> list[RequestOutput]:
        """Chat with the model's chat template: one conversation (a list of messages)
        or several (a list of lists)."""
        convs: list[list[Message]]
        if messages and isinstance(messages[0], dict):
            convs = [list(messages)]  # type: ignore[arg-type]
        else:
            convs = [list(c) for c in messages]  # type: ignore[arg-type]
        prompts = [self.tokenizer.apply_chat_template(c, add_generation_prompt) for c in convs]
        return self.generate(prompts, sampling_params)

    async def _agenerate(self, flat: list[tuple[str, Prompt, SamplingParams]]) -> dict[str, Any]:
        # steps on this thread, the one that built the model (`engine_thread.py`): no
        # clients to keep serving here, and one OpenMP team keeps torch's threads fast
        aengine = AsyncLLMEngine(self.engine, step_in_thread=False)

        async def one(rid: str, prompt: Prompt, sp: SamplingParams) -> RequestOutput:
            last = None
            async for out in aengine.generate(prompt, sp, rid, tools=self.tools):
                last = out
            assert last is not None
            return last

        try:
            outs = await asyncio.gather(*(one(*x) for x in flat))
        finally:
            await aengine.shutdown()
        return {o.request_id: o for o in outs}

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
        plan: list[tuple[float, str, Prompt, SamplingParams, list[Segment] | None]] = [
            (
                t * time_scale,
                getattr(r, "request_id", None) or self._next_id(),
                self.trace_prompt(r),
                sp,
                list(r.segments),
            )
            for t, r in zip(arrivals, requests, strict=True)
        ]
        done = self._run(plan, time_scale)
        return [done[rid] for _, rid, _, _, _ in plan if rid in done]

    def trace_prompt(self, req: Any) -> list[int]:
        """`prompt_len` token ids: the prompt text's tokens, repeated or cut to length."""
        return trace_prompt_ids(
            self.tokenizer, getattr(req, "prompt_text", None), int(req.prompt_len)
        )

    # --- the sync loop -------------------------------------------------------------
    def _run(
        self,
        plan: list[tuple[float, str, Prompt, SamplingParams, list[Segment] | None]],
        time_scale: float = 1.0,
    ) -> dict[str, RequestOutput]:
        """Serve every planned request on the shared trace driver, in real time."""
        driver = TraceDriver(self.engine, RealClock(), time_scale)
        arrivals = [
            Arrival(t, self.engine.make_request(rid, p, sp, segs, now=t), sp)
            for t, rid, p, sp, segs in plan
        ]
        stats = driver.run(sorted(arrivals, key=lambda a: a.time))
        if stats.stalled:
            raise RuntimeError("engine is stuck: requests can neither run nor resume")
        return driver.outputs

    def _next_id(self) -> str:
        self._ids += 1
        return f"req-{self._ids}"


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
