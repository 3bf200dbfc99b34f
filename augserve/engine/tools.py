"""External calls: scripted (trace-driven) and model-driven.

Scripted mode follows INFERCEPT's evaluation: a request carries its segment
plan (`Request.segments`); the call starts after the segment's planned number
of generated tokens, lasts the trace's `call_time` seconds and returns
`return_len` deterministic filler tokens.

Model-driven mode, per request, through a `ToolSession`: its
`ToolCallParser` looks at the text generated so far and says whether the
model just emitted a call; a call to a tool the server holds pauses the
request and its `ToolExecutor` runs it (async) and returns token ids or text;
a call to any other tool ends the request with finish reason "tool_calls"
(the client runs it, as OpenAI's API does).

Calls never run on the engine loop: the engine reports a `PendingCall`, and the
driver (`AsyncLLMEngine`, or the trace drivers for scripted calls) waits for it
off the loop and hands the result back with `resume`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from augserve.core.request import Request, Segment
from augserve.engine.sampling_params import GrammarSpec
from augserve.sched.output import StepEvent

FILLER_TEXT = " The tool returned the following result: 42. "
PROMPT_TEXT = "Please answer the question. "


@dataclass(frozen=True)
class ParsedCall:
    """A tool call the model emitted: a tool name and its arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str = ""


@dataclass(frozen=True)
class CallGroup(ParsedCall):
    """Several calls the model wrote as one unit (a JSON list in one `<tool_call>`, a
    `[TOOL_CALLS]` list, or every call read at the output's end). Its own name and
    arguments are the first call's (what the call-duration predictor sees); its
    server calls run one after the other in one pause (`run_call`)."""

    calls: tuple[ParsedCall, ...] = ()


def group_calls(calls: Sequence[ParsedCall], raw: str = "") -> ParsedCall | None:
    """None for no call, the call itself for one, else a `CallGroup`."""
    if not calls:
        return None
    if len(calls) == 1:
        return calls[0]
    first = calls[0]
    return CallGroup(first.name, first.arguments, raw, tuple(calls))


def calls_of(call: ParsedCall | None) -> tuple[ParsedCall, ...]:
    """The single calls `call` stands for (a group's members, in order)."""
    if call is None:
        return ()
    return call.calls if isinstance(call, CallGroup) else (call,)


class ToolCallParser(Protocol):
    """Finds a complete tool call at the end of the generated text.

    `text` is everything generated (and returned) after the prompt;
    `segment_start` is the offset in `text` where the current segment began
    (after the prompt or the last call's result), so a call that was already
    executed is never seen twice. Return None while no call is complete, a
    `CallGroup` for several calls written as one unit (a JSON list of calls).
    A parser may also have `parse_final(text, segment_start)`, called once when the
    output ends, to read every call left in the segment, including those that only
    count at the end (augserve's parsers accept an unclosed call, bare JSON objects
    or arrays, and fences there: `tool_parsers.py`).
    """

    def parse(self, text: str, segment_start: int) -> ParsedCall | None: ...


class ToolExecutor(Protocol):
    """Runs one call; returns token ids, or text that the engine tokenizes."""

    async def __call__(self, call: ParsedCall) -> list[int] | str: ...


@dataclass(frozen=True)
class ToolSession:
    """How one request's tool calls are found and run.

    `server_tools`: the names the executor runs (None: every name); a parsed
    call to any other name ends the request with finish reason "tool_calls".
    Without an executor, every call goes back to the client.
    """

    parser: ToolCallParser
    executor: ToolExecutor | None = None
    server_tools: frozenset[str] | None = None
    grammar: GrammarSpec | None = None  # a forced call (tool_choice): its grammar
    parallel: bool = False  # parallel_tool_calls: every client call of a turn, not the first

    def runs_on_server(self, name: str) -> bool:
        if self.executor is None:
            return False
        return self.server_tools is None or name in self.server_tools


@dataclass(frozen=True)
class ScriptedCall:
    """A trace's call: lasts `duration` seconds, returns `token_ids`."""

    duration: float
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class PendingCall:
    """A call the engine started; the driver runs it and resumes the request."""

    request_id: str
    start: float
    scripted: ScriptedCall | None = None
    parsed: ParsedCall | None = None
    executor: ToolExecutor | None = None  # the request's session's, for a parsed call


def filler_tokens(base: Sequence[int], n: int) -> list[int]:
    """`n` deterministic token ids: `base` repeated."""
    if n <= 0:
        return []
    if not base:
        raise ValueError("filler_tokens: base token list is empty")
    reps = -(-n // len(base))
    return (list(base) * reps)[:n]


def trace_prompt_ids(tokenizer: Any, text: str | None, n: int) -> list[int]:
    """`n` prompt token ids for a trace request: BOS (if the tokenizer adds one), then
    its text's tokens (or a fixed text's) repeated or cut to length. Without a
    tokenizer: ids 3, 4, ... (`tokenizer` is an `augserve.engine.tokenizer.Tokenizer`)."""
    if tokenizer is None:
        return filler_tokens(list(range(3, 67)), n)
    head = tokenizer.encode("")[:1] if n > 1 else []  # [BOS] or []
    base = tokenizer.encode(text or PROMPT_TEXT, add_special_tokens=False)
    return head + filler_tokens(base, n - len(head))


def scripted_event(req: Request) -> StepEvent:
    """Trace-driven decision for the token being sampled now (as tests/sched/driver.py)."""
    seg = req.current_segment
    if seg is None:
        return StepEvent.FINISH
    if req.segment_generated + 1 < max(1, seg.output_len):
        return StepEvent.NONE
    return StepEvent.CALL if seg.has_call else StepEvent.FINISH


def scripted_call(seg: Segment, base: Sequence[int]) -> ScriptedCall:
    """The trace's call: its duration (seconds of trace time) and filler result tokens."""
    return ScriptedCall(seg.call_time or 0.0, tuple(filler_tokens(base, seg.return_len)))


async def run_call(
    call: PendingCall, executor: ToolExecutor | None, time_scale: float = 1.0
) -> list[int] | str:
    """Wait for one call (async): a scripted call sleeps its duration times `time_scale`,
    a parsed call runs the request's executor (else `executor`)."""
    if call.scripted is not None:
        await asyncio.sleep(call.scripted.duration * time_scale)
        return list(call.scripted.token_ids)
    executor = call.executor or executor
    if call.parsed is None:
        raise ValueError(f"call of {call.request_id}: neither scripted nor parsed")
    if executor is None:
        raise ValueError(
            f"call of {call.request_id}: the model called a tool but no executor is set"
        )
    calls = calls_of(call.parsed)
    if len(calls) == 1:
        return await executor(calls[0])
    text, ids = "", []  # a group: each call's result in turn, in one pause
    for c in calls:
        result = await executor(c)
        if isinstance(result, str):
            text += result
        else:
            ids += result
    if text and ids:
        raise ValueError(f"call of {call.request_id}: results mix text and token ids")
    return text or ids
