"""One engine iteration's bookkeeping (`LLMEngine.step`, docs/design.md): what a step
produced (`EngineStep`), the forward's chunks (`seq_chunk`), the event of each
sampled token (`token_events`), and
acting on the scheduler's update (`absorb`: finished requests report and leave,
paused client sessions report "tool_calls", calls start)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from augserve.core.request import FinishReason, Request
from augserve.engine.events import decide
from augserve.engine.grammar import GrammarMasker
from augserve.engine.model_runner import SeqChunk
from augserve.engine.outputs import RequestOutput, SeqState, session_output
from augserve.engine.sampler import Logprob
from augserve.engine.seq_grammar import advance_grammar, sample_context
from augserve.engine.tools import PendingCall, scripted_call
from augserve.sched.output import SchedulerOutput, SchedulerUpdate, StepResult

Results = dict[str, StepResult]


@dataclass
class EngineStep:
    """What one `step()` produced."""

    outputs: list[RequestOutput] = field(default_factory=list)
    calls: list[PendingCall] = field(default_factory=list)
    finished: list[Request] = field(default_factory=list)
    num_tokens: int = 0  # tokens computed by the forward
    scheduled: SchedulerOutput | None = None  # the scheduler's decision
    update: SchedulerUpdate | None = None  # what the scheduler says happened

    @property
    def idle(self) -> bool:
        """Nothing computed, moved or reported: waiting on calls or arrivals."""
        busy = self.scheduled is not None and not self.scheduled.is_empty
        return not busy and not self.outputs


class BatchFailed(RuntimeError):
    """The forward of a step raised (`__cause__`): the requests of its batch
    (`request_ids`) finished with reason "error" and their KV was freed; `step` holds
    the iteration's outputs (theirs included). The engine can step on."""

    def __init__(self, exc: Exception, request_ids: list[str], step: EngineStep) -> None:
        super().__init__(f"{type(exc).__name__}: {exc}")
        self.request_ids = request_ids
        self.step = step


def seq_chunk(
    st: SeqState,
    n: int,
    start: int,
    sample: bool,
    blocks: list[int],
    eos_ids: frozenset[int],
    masker: GrammarMasker | None,
) -> SeqChunk:
    """The forward's chunk of `n` tokens of `st` from `start`; a sampling one carries
    its sampling context (penalties, grammar mask)."""
    req = st.request
    assert req.token_ids is not None
    ids = req.token_ids[start : start + n]
    chunk = SeqChunk(req.request_id, ids, start, blocks, sample, st.params)
    if sample:
        chunk.context = sample_context(st, eos_ids, masker)
    return chunk


def token_events(
    states: dict[str, SeqState],
    out: SchedulerOutput,
    tokens: Sequence[int | None],
    logprobs: Sequence[Logprob | None],
    eos_ids: frozenset[int],
    max_model_len: int,
) -> Results:
    """The event of every sampled token of the forward (`events.decide`), its logprob
    and grammar state recorded."""
    results: Results = {}
    for j, (c, tok) in enumerate(zip(out.chunks, tokens, strict=True)):
        if c.sample and tok is not None:
            st = states[c.request_id]
            if st.params.logprobs is not None and j < len(logprobs):
                lp = logprobs[j]
                st.logprobs.append(lp if lp is not None else Logprob(tok, 0.0))
            advance_grammar(st, tok)
            results[c.request_id] = decide(st, tok, eos_ids, max_model_len)
    return results


def absorb(
    upd: SchedulerUpdate, states: dict[str, SeqState], step: EngineStep, filler: list[int]
) -> None:
    """Act on a scheduler update: finished requests report and leave; calls start."""
    for f in upd.finished:
        st = states.pop(f.request.request_id, None)
        if st is not None:
            step.finished.append(f.request)
            step.outputs.append(st.output())
    for req in upd.sessions_paused:  # "tool_calls": the client's turn; KV kept paused
        st = states.pop(req.request_id, None)
        if st is not None:
            step.outputs.append(session_output(st.output(), FinishReason.TOOL_CALLS))
    for call in upd.calls_started:
        st = states[call.request.request_id]
        step.calls.append(pending_call(st, call.request.calls[-1].start, filler))


def pending_call(st: SeqState, now: float, filler: list[int]) -> PendingCall:
    """The call request `st` starts: its scripted plan's, or the parsed one."""
    req = st.request
    if st.scripted:
        seg = req.segments[req.segment_index]
        return PendingCall(req.request_id, now, scripted=scripted_call(seg, filler))
    executor = st.tools.executor if st.tools is not None else None
    return PendingCall(req.request_id, now, parsed=st.call, executor=executor)
