"""LLMEngine: the synchronous core that wires the Scheduler to a ModelRunner.

One `step()`:

1. `schedule(now)`: the scheduler decides chunks, swaps and discards;
2. execute the swaps (before the forward: freed device blocks may be reused
   by this iteration's chunks);
3. build one `SeqChunk` per scheduled chunk and run the forward + sampling;
4. decide a `StepEvent` for every sampled token (stop tokens, stop strings,
   model length -> FINISH; a scripted or parsed call -> CALL);
5. `update_from_output`, then report outputs, finished requests and the calls
   that started (the driver runs them and calls `resume`).

The engine never waits on a call and never reads a clock it was not given.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from augserve.core.config import SchedulerConfig
from augserve.core.cost import CostModel, LatencyProfile
from augserve.core.prediction import Prediction, Predictor
from augserve.core.request import FinishReason, Request, Segment
from augserve.engine.model_runner import ModelRunner, SeqChunk
from augserve.engine.sampling_params import SamplingParams, check_stop
from augserve.engine.tokenizer import IncrementalDetokenizer, Tokenizer
from augserve.engine.tools import (
    FILLER_TEXT,
    ParsedCall,
    PendingCall,
    ToolCallParser,
    scripted_call,
    scripted_event,
)
from augserve.predict.base import make_predictor
from augserve.sched.output import SchedulerOutput, StepEvent, StepResult
from augserve.sched.scheduler import Scheduler


@dataclass
class RequestOutput:
    """A request's output so far. `token_ids` / `text`: everything after the prompt
    (generated tokens and the calls' returned tokens); `new_token_ids` /
    `delta_text`: what was added since the previous output of this request."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    new_token_ids: list[int] = field(default_factory=list)
    delta_text: str = ""
    finished: bool = False
    finish_reason: str | None = None
    num_generated_tokens: int = 0
    num_calls: int = 0
    request: Request | None = None


@dataclass
class EngineStep:
    """What one `step()` produced."""

    outputs: list[RequestOutput] = field(default_factory=list)
    calls: list[PendingCall] = field(default_factory=list)
    finished: list[Request] = field(default_factory=list)
    num_tokens: int = 0  # tokens computed by the forward
    scheduled: SchedulerOutput | None = None  # the scheduler's decision (for inspection)

    @property
    def idle(self) -> bool:
        """Nothing computed, moved or reported: waiting on calls or arrivals."""
        busy = self.scheduled is not None and not self.scheduled.is_empty
        return not busy and not self.outputs


@dataclass
class _SeqState:
    params: SamplingParams
    detok: IncrementalDetokenizer | None
    scripted: bool
    text: str = ""
    stop_from: int = 0  # stop strings are searched from here (never inside call results)
    segment_start: int = 0  # where the current segment's text begins (for the parser)
    sent_tokens: int = 0
    sent_text: int = 0
    call: ParsedCall | None = None


def default_cost(runner: ModelRunner, cfg: SchedulerConfig) -> LatencyProfile:
    """A placeholder cost model from the runner's memory facts (fit a real one with
    `augserve profile`): CPU-ish iteration times, a PCIe-like host link."""
    kv = runner.kv_bytes_per_token
    return LatencyProfile(
        name="engine-default",
        c0=5e-3,
        c_prefill=5e-5,
        c_attn=1e-8,
        c_decode=2e-4,
        c_ctx=1e-7,
        kv_bytes=kv,
        device_kv_bytes=runner.num_device_blocks * runner.block_size * kv,
        host_kv_bytes=runner.num_host_blocks * runner.block_size * kv,
        swap_bandwidth=8e9,
        max_batch_tokens=cfg.max_batch_tokens,
        max_num_seqs=cfg.max_num_seqs,
    )


def order_swaps(
    swap_out: Sequence[tuple[int, int]], swap_in: Sequence[tuple[int, int]]
) -> list[tuple[str, list[tuple[int, int]]]]:
    """Group the iteration's block moves so no copy overwrites a block another copy
    still has to read (a block freed by one move may be the target of another).
    The scheduler's own order has no cycles, so this always terminates."""
    moves = [("out", p) for p in swap_out] + [("in", p) for p in swap_in]
    batches: list[tuple[str, list[tuple[int, int]]]] = []
    while moves:
        reads = {("dev" if k == "out" else "host", p[0]) for k, p in moves}
        ready_out = [p for k, p in moves if k == "out" and ("host", p[1]) not in reads]
        ready_in = [p for k, p in moves if k == "in" and ("dev", p[1]) not in reads]
        if not ready_out and not ready_in:
            raise RuntimeError("cyclic swap plan")
        if ready_out:
            batches.append(("out", ready_out))
        if ready_in:
            batches.append(("in", ready_in))
        done = {("out", p) for p in ready_out} | {("in", p) for p in ready_in}
        moves = [m for m in moves if m not in done]
    return batches


class LLMEngine:
    """Scheduler + ModelRunner + detokenization + call triggers. Not thread-safe."""

    def __init__(
        self,
        runner: ModelRunner,
        config: SchedulerConfig | None = None,
        tokenizer: Tokenizer | None = None,
        cost: CostModel | None = None,
        predictor: Predictor | None = None,
        tool_parser: ToolCallParser | None = None,
        clock: Callable[[], float] = time.monotonic,
        call_time_scale: float = 1.0,
    ) -> None:
        cfg = (config or SchedulerConfig()).with_(
            block_size=runner.block_size,
            num_device_blocks=runner.num_device_blocks,
            num_host_blocks=runner.num_host_blocks,
        )
        self.runner = runner
        self.tokenizer = tokenizer
        self.config = cfg
        self.cost = cost or default_cost(runner, cfg)
        self.scheduler = Scheduler(cfg, self.cost, predictor or make_predictor(cfg.predictor))
        self.tool_parser = tool_parser
        self.clock = clock
        self.call_time_scale = call_time_scale
        self.stream = True  # report unfinished requests' outputs every step (False: only finals)
        self.eos_token_ids = frozenset(runner.eos_token_ids)
        self.max_model_len = runner.max_model_len
        self._states: dict[str, _SeqState] = {}
        self._early: list[Request] = []  # finished outside a step (rejected, aborted)
        base = tokenizer.encode(FILLER_TEXT, add_special_tokens=False) if tokenizer else []
        self.filler_ids = base or list(range(3, min(64, runner.vocab_size)))

    # --- requests ---------------------------------------------------------------------
    def add_request(
        self,
        request_id: str,
        prompt: str | Sequence[int],
        params: SamplingParams | None = None,
        segments: Sequence[Segment] | None = None,
        now: float | None = None,
    ) -> Request:
        """Queue a request. With `segments` it is scripted: calls (and the end) follow the
        plan and `params.max_tokens` is not applied; otherwise it runs until a stop."""
        params = params or SamplingParams()
        req = self.make_request(request_id, prompt, params, segments, now)
        self.add(req, params, now)
        return req

    def make_request(
        self,
        request_id: str,
        prompt: str | Sequence[int],
        params: SamplingParams,
        segments: Sequence[Segment] | None = None,
        now: float | None = None,
    ) -> Request:
        """Tokenize and build a request without queueing it."""
        text = prompt if isinstance(prompt, str) else None
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("a text prompt needs a tokenizer")
            ids = self.tokenizer.encode(prompt)
        else:
            ids = [int(t) for t in prompt]
        if not ids:
            raise ValueError(f"request {request_id!r}: empty prompt")
        now = self.clock() if now is None else now
        return Request(
            request_id,
            max(0.0, now),
            len(ids),
            segments=list(segments or []),
            prompt_text=text,
            token_ids=list(ids),
            max_tokens=None if segments else params.max_tokens,
        )

    def add(
        self,
        req: Request,
        params: SamplingParams,
        now: float | None = None,
        prediction: Prediction | None = None,
    ) -> None:
        """Queue a prebuilt request (`token_ids` = its prompt; `segments` make it scripted)."""
        if req.request_id in self._states:
            raise ValueError(f"request {req.request_id!r} already exists")
        if req.token_ids is None or len(req.token_ids) != req.num_tokens:
            raise ValueError(f"request {req.request_id!r}: token_ids must hold its context")
        if req.num_tokens >= self.max_model_len:
            raise ValueError(
                f"request {req.request_id!r}: prompt of {req.num_tokens} tokens does not fit "
                f"max_model_len {self.max_model_len}"
            )
        ids = req.token_ids
        detok = IncrementalDetokenizer(self.tokenizer, ids) if self.tokenizer else None
        self._states[req.request_id] = _SeqState(params, detok, scripted=bool(req.segments))
        self.scheduler.add_request(req, self.clock() if now is None else now, prediction)
        self._collect_finished()

    def abort(self, request_id: str, now: float | None = None) -> bool:
        now = self.clock() if now is None else now
        found = self.scheduler.abort(request_id, now)
        self._collect_finished()
        return found

    def resume(
        self,
        request_id: str,
        result: Sequence[int] | str,
        now: float | None = None,
        prediction: Prediction | None = None,
    ) -> None:
        """A call came back: append its tokens (or tokenized text); the request goes on."""
        now = self.clock() if now is None else now
        st = self._states.get(request_id)
        if st is None:  # aborted while in its call: the scheduler drops the late result
            with contextlib.suppress(KeyError):
                self.scheduler.resume(request_id, [], now)
            return
        ids = self.result_ids(result)
        req = self.scheduler.paused[request_id]
        ids = ids[: max(0, self.max_model_len - 1 - req.num_tokens)]
        if st.detok is not None:
            st.detok.add(ids)
            st.text = st.detok.text
        st.stop_from = st.segment_start = len(st.text)
        st.call = None
        self.scheduler.resume(request_id, ids, now, prediction)
        self._collect_finished()

    def result_ids(self, result: Sequence[int] | str) -> list[int]:
        if isinstance(result, str):
            if self.tokenizer is None:
                raise ValueError("a text call result needs a tokenizer")
            return self.tokenizer.encode(result, add_special_tokens=False)
        return [int(t) for t in result]

    def has_unfinished(self) -> bool:
        return bool(self._states)

    def has_runnable(self) -> bool:
        return self.scheduler.has_runnable()

    def num_in_calls(self) -> int:
        return len(self.scheduler.paused)

    # --- one iteration ------------------------------------------------------------------
    def step(self, now: float | None = None) -> EngineStep:
        """One iteration. `now` (virtual time) is used for start and end when given."""
        virtual = now
        now = self.clock() if now is None else now
        out = self.scheduler.schedule(now)
        self._execute_swaps(out)
        chunks = [
            self._seq_chunk(c.request, c.num_tokens, c.start_pos, c.sample) for c in out.chunks
        ]
        tokens = self.runner.execute(chunks) if chunks else []
        results: dict[str, StepResult] = {}
        for c, tok in zip(out.chunks, tokens, strict=True):
            if c.sample and tok is not None:
                results[c.request.request_id] = self._decide(c.request, tok)
        end = self.clock() if virtual is None else virtual
        self.scheduler.update_from_output(out, results, end)
        step = EngineStep(num_tokens=out.num_scheduled_tokens, scheduled=out)
        for c in out.chunks:
            res = results.get(c.request.request_id) if c.sample else None
            if res is not None:
                self._report(c.request, res, end, step)
        step.finished.extend(self._early)
        for req in self._early:
            step.outputs.append(self._output(req))
        self._early = []
        return step

    def _execute_swaps(self, out: SchedulerOutput) -> None:
        if not out.swap_out and not out.swap_in:
            return
        for kind, pairs in order_swaps(out.swap_out, out.swap_in):
            (self.runner.swap_out if kind == "out" else self.runner.swap_in)(pairs)

    def _seq_chunk(self, req: Request, n: int, start: int, sample: bool) -> SeqChunk:
        assert req.token_ids is not None
        st = self._states[req.request_id]
        return SeqChunk(
            req.request_id,
            req.token_ids[start : start + n],
            start,
            req.block_ids,
            sample,
            st.params,
        )

    def _decide(self, req: Request, tok: int) -> StepResult:
        st = self._states[req.request_id]
        p = st.params
        if tok in p.stop_token_ids or (not p.ignore_eos and tok in self.eos_token_ids):
            return StepResult(tok, StepEvent.FINISH, FinishReason.STOP)
        if st.detok is not None:
            old = len(st.text)
            st.detok.add([tok])
            st.text = st.detok.text
            if p.stop and len(st.text) > old:
                longest = max(len(s) for s in p.stop)
                idx = check_stop(st.text, p.stop, max(st.stop_from, old - longest + 1))
                if idx is not None:
                    st.text = st.text[:idx]
                    return StepResult(tok, StepEvent.FINISH, FinishReason.STOP)
        if req.num_tokens + 1 >= self.max_model_len:
            return StepResult(tok, StepEvent.FINISH, FinishReason.LENGTH)
        if st.scripted:
            return StepResult(tok, scripted_event(req), FinishReason.STOP)
        if self.tool_parser is not None:
            st.call = self.tool_parser.parse(st.text, st.segment_start)
            if st.call is not None:
                return StepResult(tok, StepEvent.CALL)
        return StepResult(tok)

    def _report(self, req: Request, res: StepResult, now: float, step: EngineStep) -> None:
        if req.is_finished:
            self._collect_finished()
            return
        if self.stream:
            step.outputs.append(self._output(req))
        if res.event is StepEvent.CALL and req.request_id in self.scheduler.paused:
            st = self._states[req.request_id]
            if st.scripted:
                seg = req.segments[req.segment_index]
                call = scripted_call(seg, self.filler_ids, self.call_time_scale)
                step.calls.append(PendingCall(req.request_id, now, scripted=call))
            else:
                step.calls.append(PendingCall(req.request_id, now, parsed=st.call))

    def _collect_finished(self) -> None:
        for req in self.scheduler.finished:
            if req.request_id in self._states:
                self._early.append(req)
        self.scheduler.finished.clear()

    def _output(self, req: Request) -> RequestOutput:
        st = self._states[req.request_id]
        assert req.token_ids is not None
        ids = req.token_ids[req.prompt_len :]
        out = RequestOutput(
            req.request_id,
            req.prompt_text,
            req.token_ids[: req.prompt_len],
            ids,
            st.text,
            new_token_ids=ids[st.sent_tokens :],
            delta_text=st.text[st.sent_text :],
            finished=req.is_finished,
            finish_reason=req.finish_reason.value if req.finish_reason else None,
            num_generated_tokens=req.num_generated_tokens,
            num_calls=len(req.calls),
            request=req,
        )
        st.sent_tokens, st.sent_text = len(ids), len(st.text)
        if req.is_finished:
            del self._states[req.request_id]
        return out
