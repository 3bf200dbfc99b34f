"""`augserve serve --engine vllm`: our server's engine surface over vLLM's `AsyncLLM`.

The server talks to its engine through `generate(prompt, params, request_id,
segments, tools, session_id, cache_salt)` (an async iterator of our
`RequestOutput`), `abort`, `stats`, `healthy` and `shutdown`
(augserve/engine/async_engine.py), and reads `engine.engine` (`vllm_face.py`).
`VllmAsyncEngine` implements them over an `AsyncLLM` that runs
`AugServeScheduler` inside it (docs/vllm-plugin.md):

- every token vLLM samples goes through our engine's own decision
  (`engine/events.py`: stop tokens, stop strings, the tool parser, client and
  server calls), on our `SeqState`, so outputs, finish reasons and tool calls
  are those of our engine;
- a request that may call a server tool runs as one resumable streaming-input
  session of vLLM (`vllm_tools.generate_with_tools`): each turn stops at the call
  parser's end marker (a stop token when it is one token), the call runs on the
  server while the session waits in vLLM, and our scheduler inside vLLM keeps or
  releases its KV blocks (Preserve or Discard, the policy's choice); the result
  goes in as the session's next input;
- a call found where vLLM's turn cannot stop (an end marker of several tokens)
  ends the vLLM request; the call runs and a new request carries the whole
  context under the same session id, so the plugin costs it as a return and the
  prefix cache keeps what it can (Discard);
- requests without server tools are plain vLLM requests (their `session_id` links
  a client's turns for the plugin, as vLLM's own server does).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import replace
from typing import Any

from vllm.inputs import TokensPrompt  # type: ignore[import-not-found,unused-ignore]

from augserve.core.request import CallRecord, FinishReason, Request, Segment
from augserve.engine.events import decide, finish
from augserve.engine.outputs import RequestOutput, SeqState
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tokenizer import IncrementalDetokenizer, as_ids
from augserve.engine.tools import FILLER_TEXT, PendingCall, ToolSession, run_call, scripted_call
from augserve.integrations.vllm_face import IN_VLLM, RESUBMIT, VllmFace, VllmStats
from augserve.integrations.vllm_params import unsupported, vllm_params
from augserve.integrations.vllm_tools import generate_with_tools
from augserve.sched.output import SchedulerStats, StepEvent

_VLLM_REASONS = {"length": FinishReason.LENGTH, "abort": FinishReason.ABORT}


class VllmAsyncEngine:
    """The server's engine (module doc). `llm`: an `AsyncLLM` (`vllm_serve.py` builds it)."""

    def __init__(self, llm: Any, face: VllmFace, stats: VllmStats) -> None:
        self.llm = llm
        self.engine = face
        self._stats = stats
        self._ids = itertools.count()
        self._current: dict[str, str] = {}  # our request id -> its vLLM request id now
        self._end_ids: dict[type, tuple[int, ...]] = {}
        filler = face.tokenizer.encode(FILLER_TEXT, add_special_tokens=False)
        self._filler = filler or list(range(3, 64))  # scripted results, as our engine's
        self.failed_steps = 0
        self.failures_in_a_row = 0
        self.last_failure: str | None = None

    # --- the server's engine surface --------------------------------------------------
    @property
    def healthy(self) -> bool:
        return not bool(getattr(self.llm, "errored", False))

    def stats(self) -> SchedulerStats:
        return self._stats.snapshot()

    def abort(self, request_id: str) -> bool:
        vid = self._current.get(request_id)
        if vid is None:
            return False
        asyncio.get_running_loop().create_task(self.llm.abort(vid))
        return True

    async def shutdown(self) -> None:
        self.llm.shutdown()

    async def generate(
        self,
        prompt: str | Sequence[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        segments: Sequence[Segment] | None = None,
        tools: ToolSession | None = None,
        session_id: str | None = None,
        cache_salt: str | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Our engine's `generate` (module doc); ValueError for what is not mapped."""
        params = params or SamplingParams()
        bad = unsupported(params)
        if bad is not None:
            raise ValueError(f"{bad} is not supported with --engine vllm")
        rid = request_id if request_id is not None else f"req-{next(self._ids)}"
        st = self._state(rid, prompt, params, tools, session_id, cache_salt, segments)
        try:
            for k in itertools.count():
                self._current[rid] = f"{rid}.{k}"
                async with aclosing(self._one_request(st, f"{rid}.{k}")) as outs:
                    async for out in outs:
                        yield out
                if st.request.is_finished:
                    return
                if not st.request.in_call:  # vLLM's stream ended without a last output
                    yield self._finish(st, FinishReason.ABORT, time.monotonic())
                    return
                await self._run_call(st, RESUBMIT)  # found where vLLM's turn cannot stop
        finally:
            self._current.pop(rid, None)
            self._stats.paused.pop(rid, None)

    # --- one request ------------------------------------------------------------------
    def _state(
        self,
        rid: str,
        prompt: str | Sequence[int],
        params: SamplingParams,
        tools: ToolSession | None,
        session_id: str | None,
        cache_salt: str | None,
        segments: Sequence[Segment] | None = None,
    ) -> SeqState:
        tok = self.engine.tokenizer
        ids = tok.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        if not ids or len(ids) >= self.engine.max_model_len:
            raise ValueError(f"request {rid!r}: a prompt of {len(ids)} tokens does not fit")
        req = Request(
            rid,
            time.monotonic(),
            len(ids),
            prompt_text=prompt if isinstance(prompt, str) else None,
            segments=list(segments or []),
            token_ids=list(ids),
            max_tokens=None if segments else params.max_tokens,
            session_id=session_id,
            cache_salt=cache_salt,
        )
        detok = IncrementalDetokenizer(tok, req.token_ids)
        if segments:  # EOS is ignored: each segment generates its output_len tokens
            params = replace(params, ignore_eos=True)
        return SeqState(req, params, detok, bool(segments), True, tools)

    def _stop_ids(self, tools: ToolSession | None) -> tuple[int, ...]:
        """The call parser's end marker as a stop token, where it is one token."""
        if tools is None:
            return ()
        kind = type(tools.parser)
        if kind not in self._end_ids:
            end = getattr(tools.parser, "end", None)
            ids = self.engine.tokenizer.encode(end, add_special_tokens=False) if end else []
            self._end_ids[kind] = tuple(ids) if len(ids) == 1 else ()
        return self._end_ids[kind]

    def _turn_params(self, st: SeqState) -> Any:
        req = st.request
        seg = req.current_segment
        if st.scripted and seg is not None:  # exactly the segment's tokens (`scripted.py`)
            return vllm_params(st.params, (), seg.output_len - req.segment_generated)
        left = (st.params.max_tokens or self.engine.max_model_len) - req.num_generated_tokens
        stops = self._stop_ids(st.tools) if _streams(st) else ()
        return vllm_params(st.params, stops, left)

    async def _one_request(self, st: SeqState, vid: str) -> AsyncGenerator[RequestOutput, None]:
        """One vLLM request: a streaming session when server calls may come, else plain.
        Returns when `st` finished, or in a call (one vLLM's turn ran past)."""
        req, params = st.request, self._turn_params(st)
        assert req.token_ids is not None
        prompt = TokensPrompt(prompt_token_ids=list(req.token_ids))
        if req.cache_salt is not None:
            prompt["cache_salt"] = req.cache_salt
        outs: Any
        if _streams(st):
            outs = generate_with_tools(
                self.llm, req.token_ids, params, vid, lambda _turn, _ids: self._resume(st),
                turn_max_tokens=lambda _turn: self._turn_params(st).max_tokens,
                session_id=req.session_id,
            )  # fmt: skip
        else:
            outs = self.llm.generate(prompt, params, vid, session_id=req.session_id)
        async with aclosing(outs):
            async for out in outs:
                emit, leave = self._absorb(st, out)
                if emit is not None:
                    yield emit
                if leave:
                    return

    def _absorb(self, st: SeqState, out: Any) -> tuple[RequestOutput | None, bool]:
        """Each token of a vLLM delta through our engine's decision: the output to show,
        and whether to leave this vLLM request (finished, or a call its turn runs past)."""
        req, now = st.request, time.monotonic()
        comp: Any = out.outputs[0] if out.outputs else None
        ids = list(comp.token_ids) if comp is not None else []
        if req.first_scheduled_time is None:
            req.first_scheduled_time = now
            req.num_cached_prompt_tokens = int(getattr(out, "num_cached_tokens", 0) or 0)
        turn_end = comp is not None and comp.finish_reason is not None
        for i, tok in enumerate(ids):
            result = decide(st, tok, self.engine.eos_ids, self.engine.max_model_len)
            req.append_generated(tok, now)
            if result.event is StepEvent.NONE and turn_end and i + 1 == len(ids):
                # vLLM ended the turn where our decision did not (its stop token, length):
                # our end of output, which reads the calls left in the segment
                result = finish(st, tok, _VLLM_REASONS.get(comp.finish_reason, FinishReason.STOP))
            if result.event is StepEvent.FINISH:
                return self._finish(st, result.finish_reason or FinishReason.STOP, now), True
            if result.event is StepEvent.CALL:
                req.calls.append(CallRecord(now, tool=result.tool, args_len=result.args_len))
                at_turn_end = turn_end and i + 1 == len(ids)
                return st.output(), not at_turn_end  # else vLLM's session waits for the result
        if out.finished or turn_end:  # ended without a token (an abort)
            return self._finish(st, FinishReason.ABORT, now), True
        return (st.output() if ids else None), False

    def _finish(self, st: SeqState, reason: FinishReason, now: float) -> RequestOutput:
        req = st.request
        req.status, req.finish_reason, req.finish_time = reason.status, reason, now
        return st.output()

    async def _resume(self, st: SeqState) -> list[int] | None:
        """A streaming session's turn ended: run its call (None: no call, the end). vLLM
        drops the turn's last sampled token at the next input: it goes in again first."""
        if not st.request.in_call or st.request.is_finished:
            return None
        last = st.request.token_ids[-1:] if st.request.token_ids else []
        ids = await self._run_call(st, IN_VLLM)
        return last + ids

    async def _run_call(self, st: SeqState, where: str) -> list[int]:
        """Run `st.call` on the server; its result joins the context (as `LLMEngine.resume`)."""
        req = st.request
        assert req.token_ids is not None
        self._stats.paused[req.request_id] = where
        start = req.calls[-1].start
        error = False
        try:
            result = await run_call(self._pending(st, start), None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failing tool answers with its error, as agent loops do
            result, error = f"Error: {exc}", True
        finally:
            self._stats.paused.pop(req.request_id, None)
        room = max(0, self.engine.max_model_len - 1 - req.num_tokens)
        ids = as_ids(self.engine.tokenizer, result, "call result")[:room]
        now = time.monotonic()
        st.add_returned(ids, error, now)  # a parsed call's result is kept there
        record = req.calls[-1]
        record.end, record.returned_tokens = now, len(ids)
        req.append_returned(len(ids), ids)
        req.segment_index += 1
        req.segment_generated = 0
        return ids

    def _pending(self, st: SeqState, start: float) -> PendingCall:
        req = st.request
        if st.scripted:
            seg = req.segments[req.segment_index]
            return PendingCall(req.request_id, start, scripted=scripted_call(seg, self._filler))
        assert st.tools is not None and st.call is not None
        return PendingCall(req.request_id, start, parsed=st.call, executor=st.tools.executor)


def _streams(st: SeqState) -> bool:
    """A request that may call a server tool (or a scripted one) runs as a streaming
    session (module doc)."""
    return st.scripted or (st.tools is not None and st.tools.executor is not None)
