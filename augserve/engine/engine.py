"""LLMEngine: the synchronous core that wires the Scheduler to a ModelRunner.

One `step()` is three phases, which a virtual-clock driver may call apart:

1. `schedule(now)`: the scheduler decides chunks (with block tables), swaps
   and discards;
2. `execute(out)`: the swaps (before the forward: freed device blocks may be
   reused by this iteration's chunks), one forward over every chunk, sampling,
   and a `StepEvent` per sampled token (stop tokens, stop strings, model
   length -> FINISH; a scripted or parsed call -> CALL);
3. `commit(out, results, end)`: `update_from_output`, then the outputs, the
   finished requests and the calls that started, all read from the
   scheduler's `SchedulerUpdate` (the driver runs the calls and calls
   `resume`).

The engine never waits on a call and reads only the clock it was given. A forward
that raises aborts only its batch: its requests finish with reason "error", the
iteration is committed, and `step()` raises `BatchFailed` with its outputs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence

from augserve.core.config import SchedulerConfig
from augserve.core.latency import LatencyModel
from augserve.core.pace import PaceConfig
from augserve.core.prediction import Prediction, Predictor
from augserve.core.request import FinishReason, Request, Segment
from augserve.engine.background_fit import LatencyFit, SwitchableLatency
from augserve.engine.engine_pace import EnginePace
from augserve.engine.engine_step import (
    BatchFailed,
    EngineStep,
    Results,
    absorb,
    seq_chunk,
    token_events,
)
from augserve.engine.grammar import GrammarMasker
from augserve.engine.grammar_cache import DEFAULT_BYTES
from augserve.engine.latency_default import default_latency
from augserve.engine.model_runner import ModelRunner, SeqChunk
from augserve.engine.outputs import SeqState
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.seq_grammar import LazyMasker, attach_grammars
from augserve.engine.swaps import order_swaps
from augserve.engine.tokenizer import IncrementalDetokenizer, Tokenizer, as_ids
from augserve.engine.tools import FILLER_TEXT, ToolSession
from augserve.predict.base import make_predictor
from augserve.sched.output import (
    SchedulerOutput,
    SchedulerStats,
    SchedulerUpdate,
)
from augserve.sched.scheduler import Scheduler


class LLMEngine:
    """Scheduler + ModelRunner + detokenization + call triggers. Not thread-safe."""

    def __init__(
        self,
        runner: ModelRunner,
        config: SchedulerConfig | None = None,
        tokenizer: Tokenizer | None = None,
        latency: LatencyModel | None = None,
        predictor: Predictor | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_model_len: int | None = None,
    ) -> None:
        self.runner = runner
        self.tokenizer = tokenizer
        self.config = (config or SchedulerConfig()).with_(
            block_size=runner.block_size,
            num_device_blocks=runner.num_device_blocks,
            num_host_blocks=runner.num_host_blocks,
        )
        self.latency = latency or default_latency(runner, self.config)
        # where the latency model came from: fitted / cached / file / default (`builder`)
        self.latency_source = "file" if latency is not None else "default"
        self.latency_fit: LatencyFit | None = None  # a fit running between steps
        self.pace: EnginePace | None = None  # the latency model follows the engine's pace
        self.predictor = predictor or make_predictor(self.config.predictor)
        self.scheduler = Scheduler(self.config, self.latency, self.predictor)
        self.clock = clock
        # the tokenizer's, read with its vocabulary (the runner would load another copy)
        eos = tokenizer.eos_token_ids if tokenizer is not None else runner.eos_token_ids
        self.eos_token_ids = frozenset(eos)
        self.max_model_len = min(runner.max_model_len, max_model_len or runner.max_model_len)
        self._states: dict[str, SeqState] = {}
        self._early = EngineStep()  # finished outside a step (rejected, aborted, too long)
        base = tokenizer.encode(FILLER_TEXT, add_special_tokens=False) if tokenizer else []
        self.filler_ids = base or list(range(3, min(64, runner.vocab_size)))
        self.masker = LazyMasker()  # constrained decoding: built on first use
        self.grammar_cache_bytes = DEFAULT_BYTES  # the bound of its compiled grammars

    @property
    def grammars(self) -> GrammarMasker:
        """The grammar compiler and masker of this engine's tokenizer (built on first use)."""
        vocab, stop = self.runner.vocab_size, sorted(self.eos_token_ids)
        return self.masker.get(self.tokenizer, vocab, stop, self.grammar_cache_bytes)

    # --- requests ---------------------------------------------------------------------
    def make_request(
        self,
        request_id: str,
        prompt: str | Sequence[int],
        params: SamplingParams,
        segments: Sequence[Segment] | None = None,
        now: float | None = None,
        session_id: str | None = None,
        cache_salt: str | None = None,
    ) -> Request:
        """Tokenize and build a request without queueing it. With `segments` it is
        scripted: calls (and the end) follow the plan and `max_tokens` is not applied.
        `session_id`: the client's session id (a paused session of that id continues).
        `cache_salt`: its tenant's salt (`sched/prefix_cache.py`)."""
        text = prompt if isinstance(prompt, str) else None
        ids = as_ids(self.tokenizer, prompt, "prompt")
        if not ids:
            raise ValueError(f"request {request_id!r}: empty prompt")
        self._check_fits(request_id, len(ids))
        now = self.clock() if now is None else now
        return Request(
            request_id,
            max(0.0, now),
            len(ids),
            segments=list(segments or []),
            prompt_text=text,
            token_ids=list(ids),
            max_tokens=None if segments else params.max_tokens,
            session_id=session_id,
            cache_salt=cache_salt,
        )

    def add_request(
        self,
        request_id: str,
        prompt: str | Sequence[int],
        params: SamplingParams | None = None,
        segments: Sequence[Segment] | None = None,
        now: float | None = None,
        tools: ToolSession | None = None,
        stream: bool = True,
    ) -> Request:
        """Build and queue a request (see `make_request` and `add`)."""
        params = params or SamplingParams()
        req = self.make_request(request_id, prompt, params, segments, now)
        self.add(req, params, now, tools=tools, stream=stream)
        return req

    def add(
        self,
        req: Request,
        params: SamplingParams,
        now: float | None = None,
        prediction: Prediction | None = None,
        tools: ToolSession | None = None,
        stream: bool = True,
    ) -> None:
        """Queue a prebuilt request (`token_ids` = its prompt; `segments` make it scripted).
        `stream`: report an output after every step (else only when it finishes)."""
        if req.request_id in self._states:
            raise ValueError(f"request {req.request_id!r} already exists")
        if req.token_ids is None or len(req.token_ids) != req.num_tokens:
            raise ValueError(f"request {req.request_id!r}: token_ids must hold its context")
        self._check_fits(req.request_id, req.num_tokens)
        tok = self.tokenizer
        detok = IncrementalDetokenizer(tok, req.token_ids) if tok is not None else None
        st = SeqState(req, params, detok, bool(req.segments), stream, tools)
        attach_grammars(st, lambda: self.grammars)
        self._states[req.request_id] = st
        now = self.clock() if now is None else now
        self._absorb(self.scheduler.add_request(req, now, prediction), self._early)

    def _check_fits(self, request_id: str, num_tokens: int) -> None:
        if num_tokens >= self.max_model_len:
            raise ValueError(
                f"request {request_id!r}: prompt of {num_tokens} tokens does not fit "
                f"max_model_len {self.max_model_len}"
            )

    def abort(self, request_id: str, now: float | None = None, error: bool = False) -> bool:
        """Abort a live request; False if it is unknown or already finished. `error`:
        finish it with reason "error" (the forward of its batch failed)."""
        if request_id not in self._states:
            return False
        now = self.clock() if now is None else now
        reason = FinishReason.ERROR if error else FinishReason.ABORT
        self._absorb(self.scheduler.abort(request_id, now, reason), self._early)
        return True

    def resume(
        self,
        request_id: str,
        result: Sequence[int] | str,
        now: float | None = None,
        prediction: Prediction | None = None,
        error: bool = False,
    ) -> None:
        """A call came back: append its tokens (or tokenized text); the request goes on.
        `error`: the result is an error message (the tool failed)."""
        now = self.clock() if now is None else now
        st = self._states.get(request_id)
        if st is None:  # aborted while in its call: the scheduler drops the late result
            with contextlib.suppress(KeyError):
                self.scheduler.resume(request_id, 0, now)
            return
        req = st.request
        ids = self.result_ids(result)[: max(0, self.max_model_len - 1 - req.num_tokens)]
        st.add_returned(ids, error, now)
        self._absorb(self.scheduler.resume(request_id, len(ids), now, ids, prediction), self._early)

    def result_ids(self, result: Sequence[int] | str) -> list[int]:
        return as_ids(self.tokenizer, result, "call result")

    # --- the latency model --------------------------------------------------------------
    def set_latency(self, latency: LatencyModel, source: str) -> None:
        """Price with `latency` from now on (the background fit's result: the engine
        must have been built with a `SwitchableLatency`, `builder.build_engine`)."""
        if not isinstance(self.latency, SwitchableLatency):
            raise ValueError("set_latency needs an engine built with a SwitchableLatency")
        if self.pace is not None:
            self.pace.rebase(latency)
        else:
            self.latency.current = latency
        self.scheduler.latency_changed()
        self.latency_source = source

    def follow_pace(self, config: PaceConfig) -> None:
        """Price with the profile scaled by the pace measured on this engine's own
        iterations (`engine_pace.py`; needs a `SwitchableLatency`, as `set_latency`)."""
        if not isinstance(self.latency, SwitchableLatency):
            raise ValueError("follow_pace needs an engine built with a SwitchableLatency")
        self.pace = EnginePace(self.latency, config, self.config.block_size)

    def fit_step(self) -> None:
        """One piece of the background latency fit (`background_fit.py`), between steps;
        when it is done the scheduler switches to the fitted model."""
        fit = self.latency_fit
        if fit is not None and fit.advance(self.scheduler.pool, self.set_latency):
            self.latency_fit = None

    # --- queries ------------------------------------------------------------------------
    def has_unfinished(self) -> bool:
        return bool(self._states)

    def has_runnable(self) -> bool:
        return self.scheduler.has_runnable()

    def has_pending_outputs(self) -> bool:
        """Requests finished outside a step (rejected, aborted, too long) not yet reported."""
        return bool(self._early.outputs or self._early.calls)

    def flush(self) -> EngineStep:
        """Report what finished outside a step, without running one."""
        step, self._early = self._early, EngineStep()
        return step

    def num_in_calls(self) -> int:
        return self.scheduler.num_in_calls()

    def get_request(self, request_id: str) -> Request | None:
        st = self._states.get(request_id)
        return st.request if st is not None else None

    def stats(self) -> SchedulerStats:
        return self.scheduler.stats()

    # --- one iteration ------------------------------------------------------------------
    def step(self, now: float | None = None) -> EngineStep:
        """One iteration on the engine's clock (`now`, if given, is its start and end).
        A forward that raises fails its batch only: `BatchFailed` (module doc)."""
        out = self.schedule(self.clock() if now is None else now)
        t0 = time.perf_counter()
        try:
            results = self.execute(out)
        except Exception as exc:
            rids = list(dict.fromkeys(c.request_id for c in out.chunks))
            for rid in rids:
                self.abort(rid, error=True)
            step = self.commit(out, {}, self.clock() if now is None else now)
            raise BatchFailed(exc, rids, step) from exc
        pace = self.pace
        if pace is not None and now is None and pace.observe(out, time.perf_counter() - t0):
            self.scheduler.latency_changed()  # wall time only: a virtual clock has no pace
        return self.commit(out, results, self.clock() if now is None else now)

    def schedule(self, now: float) -> SchedulerOutput:
        return self.scheduler.schedule(now)

    def execute(self, out: SchedulerOutput) -> Results:
        """Swaps, the forward and sampling; the event of every sampled token."""
        for kind, pairs in order_swaps(out.swap_out, out.swap_in):
            (self.runner.swap_out if kind == "out" else self.runner.swap_in)(pairs)
        if not out.chunks:
            return {}
        chunks = [
            self._seq_chunk(c.request, c.num_tokens, c.start_pos, c.sample, c.block_table)
            for c in out.chunks
        ]
        tokens = self.runner.execute(chunks)
        logprobs = self.runner.last_logprobs
        return token_events(
            self._states, out, tokens, logprobs, self.eos_token_ids, self.max_model_len
        )

    def commit(self, out: SchedulerOutput, results: Results, end: float) -> EngineStep:
        """Report the iteration to the scheduler; outputs, finishes and calls from its update."""
        upd = self.scheduler.update_from_output(out, results, end)
        step = self.flush()
        step.num_tokens, step.scheduled, step.update = out.num_scheduled_tokens, out, upd
        self._absorb(upd, step)
        for rid in results:
            st = self._states.get(rid)
            if st is not None and st.stream:
                step.outputs.append(st.output())
        return step

    def _absorb(self, upd: SchedulerUpdate, step: EngineStep) -> None:
        absorb(upd, self._states, step, self.filler_ids)

    def _seq_chunk(
        self, req: Request, n: int, start: int, sample: bool, blocks: list[int]
    ) -> SeqChunk:
        st = self._states[req.request_id]
        return seq_chunk(st, n, start, sample, blocks, self.eos_token_ids, self.masker.built)
