"""Running the choices of one request on the engine, and what a client may see of them.

`ChoiceState` turns a request's outputs into content a client may see: per segment
(the text generated since the last tool result), the tool parser's streaming-safe
view, minus anything that may still become a stop string. Non-streaming answers are
the sum of the same deltas, so both modes return the same text.

`merge_choices` runs the `n` choices of a request as concurrent `generate()` calls
and yields their outputs as they come; leaving it early (a client gone) cancels
them all, which aborts the requests and frees their KV blocks.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from augserve.core.request import Segment
from augserve.engine.sampler import Logprob
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tool_parsers import held_prefix
from augserve.engine.tools import ToolSession
from augserve.server.request_tools import CallExecutor, openai_tool_calls
from augserve.server.stages import StageClock
from augserve.server.state import ServerState

if TYPE_CHECKING:
    from augserve.engine.outputs import RequestOutput


@dataclass
class ChoiceState:
    index: int
    parser: Any = None  # a StreamingToolParser, or None when tools are off
    executor: CallExecutor | None = None
    stops: tuple[str, ...] = ()
    forced: bool = False  # tool_choice forces a call: the first segment is that call only
    content: str = ""
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the prefix cache held (usage.prompt_tokens_details)
    token_ids: list[int] = field(default_factory=list)  # generated ids so far
    new_ids: list[int] = field(default_factory=list)  # generated ids of the last delta
    logprobs: list[Logprob] = field(default_factory=list)  # per generated token, if asked
    _sent: int = 0
    _results: int = 0
    _lp_sent: int = 0

    def take_logprobs(self) -> list[Logprob]:
        """The logprobs not yet streamed."""
        new = self.logprobs[self._lp_sent :]
        self._lp_sent = len(self.logprobs)
        return new

    def delta(self, out: RequestOutput | Ended) -> str:
        """New visible content of this choice after `out`."""
        if isinstance(out, Ended):
            self.finish_reason, self.new_ids = out.finish_reason, []
            return ""
        self.new_ids = list(out.new_token_ids)
        self.token_ids += self.new_ids
        self.logprobs += out.new_logprobs
        new = self.visible_delta(out)
        self.content += new
        self.completion_tokens = out.num_generated_tokens
        self.cached_tokens = out.num_cached_tokens
        if out.finished:
            self.finish_reason = out.finish_reason
            self.on_finish(out)
        return new

    def visible_delta(self, out: RequestOutput) -> str:
        """The new text a client may see: per segment, the parser's streaming-safe view
        minus a possible stop string's start."""
        if len(out.tool_results) > self._results:  # a tool answered: a new segment began
            self._results, self._sent = len(out.tool_results), 0
        seg = out.segment_text
        visible = self.parser.content(seg, out.finished) if self.parser is not None else seg
        if self.forced and self._results == 0:
            visible = ""  # a forced call cut short (max_tokens) is not content either
        if not out.finished:
            held = max((held_prefix(visible, s) for s in self.stops), default=0)
            visible = visible[: len(visible) - held]
        new = visible[self._sent :]
        self._sent = max(self._sent, len(visible))
        return new

    def on_finish(self, out: RequestOutput) -> None:
        """The client's tool calls of the finished choice, with fresh ids."""
        if out.tool_calls:
            ids = [f"call_{uuid.uuid4().hex[:24]}" for _ in out.tool_calls]
            self.tool_calls = openai_tool_calls(out.tool_calls, ids)

    def extra_fields(self) -> dict[str, Any]:
        """Fields an extension adds to the finished choice (`server/scripted.py`)."""
        return {}

    @property
    def trace(self) -> list[Any]:
        return self.executor.trace if self.executor is not None else []


@dataclass
class Choice:
    """One choice to run: its parameters and tool session."""

    state: ChoiceState
    params: SamplingParams
    session: ToolSession | None = None
    segments: list[Segment] | None = None  # a scripted tool plan
    session_id: str | None = None  # the client's session id (`sched/sessions.py`)
    cache_salt: str | None = None  # its tenant's salt (`server/tenancy.py`)
    clock: StageClock | None = None  # its request's stage marks (`server/stages.py`)


@dataclass(frozen=True)
class Ended:
    """A choice that ended without a final output from the engine (the server cut it
    at shutdown); it reads like a finished `RequestOutput` to the handlers."""

    finish_reason: str = "abort"
    finished: bool = True


async def run_choice(
    state: ServerState, prompt: list[int], choice: Choice, request_id: str
) -> AsyncGenerator[RequestOutput, None]:
    """One `generate()` call. Closing this generator early (a client gone) closes the
    engine's at once, which aborts the request and frees its KV blocks."""
    finished, reason = False, "abort"
    if choice.clock is not None:
        choice.clock.mark("submitted")
    gen = state.engine.generate(
        prompt,
        choice.params,
        request_id=request_id,
        segments=choice.segments,
        tools=choice.session,
        session_id=choice.session_id,
        cache_salt=choice.cache_salt,
    )
    try:
        async with aclosing(gen):
            async for out in gen:
                if choice.clock is not None:
                    choice.clock.mark("first_out")
                if out.finished:
                    finished = True
                    state.metrics.observe_finished(out.request, out.finish_reason)
                    if out.tool_calls:
                        state.metrics.client_tool_calls.inc(len(out.tool_calls))
                yield out
    except Exception:
        reason = "error"  # e.g. RequestFailed: the forward of its batch failed
        raise
    finally:
        if not finished:  # left early (the engine aborted it) or failed
            state.metrics.observe_finished(None, reason)


_DONE = object()


async def merge_choices(
    state: ServerState, items: Sequence[tuple[list[int], Choice]], base_id: str
) -> AsyncGenerator[tuple[int, RequestOutput | Ended], None]:
    """(item index, output) from all (prompt, choice) items, in arrival order. Each
    choice runs in its own task; the first failure cancels the rest. `state.live`
    maps its request id to a function that ends it at once (for the shutdown, when
    an aborted request's final output does not come)."""
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def pump(i: int) -> None:
        rid = f"{base_id}-{i}"
        state.live[rid] = lambda: queue.put_nowait((i, Ended()))
        try:
            prompt, choice = items[i]
            async with aclosing(run_choice(state, prompt, choice, rid)) as gen:
                async for out in gen:
                    queue.put_nowait((i, out))
        except Exception as exc:
            queue.put_nowait(exc)
        finally:
            state.live.pop(rid, None)
            queue.put_nowait(_DONE)

    tasks = [asyncio.create_task(pump(i)) for i in range(len(items))]
    ended: set[int] = set()
    try:
        left = len(tasks)
        while left:
            item = await queue.get()
            if item is _DONE:
                left -= 1
            elif isinstance(item, BaseException):
                raise item
            elif item[0] not in ended:
                if item[1].finished:
                    ended.add(item[0])
                    if isinstance(item[1], Ended):
                        tasks[item[0]].cancel()
                yield item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def until_disconnected(receive: Any) -> None:
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return


async def unless_disconnected(coro: Any, receive: Any) -> Any:
    """Run `coro`; if the client disconnects first, cancel it (aborting its requests)
    and raise `ClientGone`."""
    work = asyncio.ensure_future(coro)
    watch = asyncio.ensure_future(until_disconnected(receive))
    try:
        done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        if work in done:
            return work.result()
        raise ClientGone()
    finally:
        for t in (work, watch):
            if not t.done():
                t.cancel()
        await asyncio.gather(work, watch, return_exceptions=True)


class ClientGone(Exception):
    pass


def with_session_header(req: Any, http: Any) -> Any:
    """`req` with its `session_id` taken from the X-Session-Id header when the body
    gives none."""
    header = http.headers.get("x-session-id")
    if req.session_id is None and header:
        return req.model_copy(update={"session_id": header[:256]})
    return req
