"""Client sessions in the simulator: the tools run on the client (docs/design.md, executors).

With `Simulator(client_sessions=True)` a planned request is played the way an
OpenAI agent loop drives a server: each segment that ends with a call ends the
request with `finish_reason="tool_calls"` (the scheduler keeps it as a paused
client session, `sched/sessions.py`), and `call_time` seconds later the
client sends the next turn, a new request whose prompt is the whole context so
far plus the call's `return_len` tokens, under the session's id, with the rest
of the plan. Its prompt extends the paused context, so it takes the session's
KV over (or finds it in the prefix cache), exactly as on the server. Token ids
are the session's synthetic stream (`core/token_ids.py`), so continuations and
the prefix cache match where they would with real text. Each turn is a request
of its own in the result, as the server counts them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from augserve.core.request import FinishReason, Request, Segment
from augserve.core.token_ids import synthetic_token_ids
from augserve.sched.output import SchedulerOutput, StepEvent, StepResult


def with_token_ids(req: Request) -> Request:
    """The first turn of a session: its prompt as the session's synthetic ids."""
    if req.token_ids is not None:
        return req
    key = req.session_id or req.request_id
    ids = synthetic_token_ids(key, 0, req.prompt_len)
    return replace(req, token_ids=ids, session_id=key)


def segment_ends(out: SchedulerOutput) -> Iterator[tuple[Request, Segment | None]]:
    """The requests whose planned segment ends with this step's token, each with that
    segment (None past the plan: the request ends now)."""
    for chunk in out.chunks:
        if not chunk.sample:
            continue
        req = chunk.request
        segments, k = req.segments, req.segment_index
        seg = segments[k] if k < len(segments) else None
        if seg is None or req.segment_generated + 1 >= max(1, seg.output_len):
            yield req, seg


def client_results(out: SchedulerOutput) -> dict[str, StepResult]:
    """A client's report: a segment with a call ends the request with "tool_calls"."""
    results: dict[str, StepResult] = {}
    for req, seg in segment_ends(out):
        if seg is not None and seg.has_call:
            results[req.request_id] = StepResult(
                event=StepEvent.FINISH, finish_reason=FinishReason.TOOL_CALLS, tool=seg.tool
            )
        else:
            results[req.request_id] = _FINISH
    return results


_FINISH = StepResult(event=StepEvent.FINISH)


def next_turn(old: Request, turn: int, arrival: float) -> Request:
    """Turn `turn` of `old`'s session: its context, the call's result, the rest of the plan."""
    assert old.token_ids is not None, "a client session's turn carries token ids"
    seg = old.segments[old.segment_index]
    n = len(old.token_ids)
    ids = list(old.token_ids) + synthetic_token_ids(old.token_key, n, n + seg.return_len)
    root = old.request_id.split("/", 1)[0]
    return Request(
        f"{root}/{turn}", arrival, len(ids), list(old.segments[old.segment_index + 1 :]),
        kind=old.kind, token_ids=ids, session_id=old.token_key, cache_salt=old.cache_salt,
    )  # fmt: skip
