"""Ended turns remembered by session until the client resubmits their context (a call's return)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from augserve.core.request import Request


@dataclass
class EndedTurn:
    """A conversation's last turn: its mirror, its context length and when it ended."""

    mirror: Request
    context_len: int
    end: float


class EndedTurns:
    """At most `max_sessions` turns, each kept `ttl_s` seconds, oldest dropped first."""

    def __init__(self, ttl_s: float, max_sessions: int) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._turns: OrderedDict[str, EndedTurn] = OrderedDict()

    def put(self, session: str, mirror: Request, now: float) -> None:
        if not self.max_sessions:
            return
        self._turns[session] = EndedTurn(mirror, mirror.num_tokens, now)
        self._turns.move_to_end(session)
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
            self._turns.popitem(last=False)
