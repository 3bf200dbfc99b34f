"""Ended turns remembered by session until the client resubmits their context (a call's return),
and the mirror of the turn that continues one."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from augserve.core.request import CallRecord, Request, Segment


@dataclass
class EndedTurn:
    """A conversation's last turn: its mirror, its context length and when it ended."""

    mirror: Request
    context_len: int
    end: float


class EndedTurns:
    """At most `max_sessions` turns, each kept `ttl_s` seconds, oldest dropped first.

    `on_drop` is told of every turn that leaves without being taken (expired, pushed
    out by the bound, or replaced by a newer turn of its session): no resubmission
    came, so the turn ended the conversation (the online predictor learns that)."""

    def __init__(
        self,
        ttl_s: float,
        max_sessions: int,
        on_drop: Callable[[EndedTurn], None] | None = None,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.on_drop = on_drop
        self._turns: OrderedDict[str, EndedTurn] = OrderedDict()

    def put(self, session: str, mirror: Request, now: float) -> None:
        if not self.max_sessions:
            self._drop(EndedTurn(mirror, mirror.num_tokens, now))
            return
        old = self._turns.pop(session, None)
        if old is not None:
            self._drop(old)
        self._turns[session] = EndedTurn(mirror, mirror.num_tokens, now)
        self._expire(now)

    def has(self, session: str, now: float) -> bool:
        self._expire(now)
        return session in self._turns

    def take(self, session: str | None, now: float) -> EndedTurn | None:
        self._expire(now)
        return self._turns.pop(session, None) if session else None

    def __len__(self) -> int:
        return len(self._turns)

    def _expire(self, now: float) -> None:
        while self._turns and (
            len(self._turns) > self.max_sessions
            or now - next(iter(self._turns.values())).end > self.ttl_s
        ):
            self._drop(self._turns.popitem(last=False)[1])

    def _drop(self, turn: EndedTurn) -> None:
        if self.on_drop is not None:
            self.on_drop(turn)


def continue_turn(
    old: Request,
    request_id: str,
    num_tokens: int,
    ctx_at_call: int,
    call_start: float,
    now: float,
    plan: Sequence[Segment] | None,
) -> Request:
    """The mirror of a turn that resumes a call: what our scheduler's `resume` leaves.
    The tokens past `ctx_at_call` are the call's result."""
    returned = max(0, num_tokens - ctx_at_call)
    index = old.segment_index + 1
    tail = list(plan) if plan else old.segments[index:]
    mirror = Request(
        request_id=request_id,
        arrival_time=old.arrival_time,
        prompt_len=old.prompt_len,
        segments=[*old.segments[:index], *tail],
        kind=old.kind,
    )
    mirror.num_tokens = num_tokens
    mirror.num_generated_tokens = old.num_generated_tokens
    mirror.num_returned_tokens = old.num_returned_tokens + returned
    mirror.segment_index = index
    mirror.queue_time = old.queue_time
    mirror.calls = [*old.calls, CallRecord(start=call_start, end=now, returned_tokens=returned)]
    mirror.first_scheduled_time = old.first_scheduled_time
    mirror.first_token_time = old.first_token_time
    return mirror
