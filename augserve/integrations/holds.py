"""Client sessions' KV held through their calls inside another engine (vLLM): the bookkeeping.

A turn that ends in a session (`session_id`) with a call predicted after it is, on
the client, a call: the client runs the tool and sends the whole context again. The
engine frees the turn's blocks into its prefix cache, where they stay only while
nothing evicts them, least recently freed last: the context whose call has just
begun (whose return is furthest away) outlives the one about to return. Where our
policy chooses Preserve for that call (`PolicyBridge.finish`), the plugin keeps the
turn's blocks referenced instead (vLLM: `_free_blocks` skipped), so the next turn's
prefix lookup finds all of them; Discard frees them as vLLM does. Our own engine does
the same with its paused client sessions (`sched/sessions.py`).

A hold ends, and the engine frees the blocks as it would have at the turn's end,

- when the session's next turn has been scheduled (it holds the blocks it shares
  with the old turn by then, so only the old turn's own tail goes);
- when memory is short (`victims`): the holds whose calls are predicted to return
  last go first, and a hold whose next turn has already come goes last;
- at `release_at`: twice the predicted call plus a second after the turn ended
  (our choice: the paper is silent on calls run by the client), or `ttl_s` while
  its next turn waits to be scheduled.

Nothing here reads a clock or imports an engine: times are passed in, and the
engine's request objects are carried through opaquely.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

GRACE_S = 1.0  # a hold outlives twice its predicted call by this much


@dataclass
class Held:
    """One held turn: the engine's finished request, whose blocks stay referenced."""

    request_id: str
    request: Any
    session: str
    blocks: int
    expected_return: float
    release_at: float
    successor: str | None = None


class SessionHolds:
    """The held turns, by request id and by session (see the module docstring)."""

    def __init__(self, ttl_s: float) -> None:
        if not ttl_s > 0:
            raise ValueError(f"SessionHolds.ttl_s must be > 0, got {ttl_s}")
        self.ttl_s = ttl_s
        self._held: dict[str, Held] = {}
        self._by_session: dict[str, str] = {}
        self.counts = {"held": 0, "taken_over": 0, "expired": 0, "pressure": 0}

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._held

    def blocks(self) -> int:
        """Blocks held in all (reclaimable: the dynamic budget counts them)."""
        return sum(h.blocks for h in self._held.values())

    def hold(
        self, request_id: str, request: Any, session: str, blocks: int, now: float, call_s: float
    ) -> list[Held]:
        """Hold a turn that ended at `now` with a call predicted to last `call_s`;
        returns the holds to free now (an older turn of the same session)."""
        out = [self._pop(old)] if (old := self._by_session.get(session)) else []
        call = max(0.0, call_s)
        release = now + min(self.ttl_s, 2.0 * call + GRACE_S)
        self._held[request_id] = Held(request_id, request, session, blocks, now + call, release)
        self._by_session[session] = request_id
        self.counts["held"] += 1
        return out

    def successor_arrived(self, session: str | None, request_id: str, now: float) -> bool:
        """The session's next turn came: its hold waits for it to be scheduled (at most
        `ttl_s` more). Returns whether the session had a hold."""
        held = self._held.get(self._by_session.get(session or "", ""))
        if held is None:
            return False
        held.successor = request_id
        held.release_at = now + self.ttl_s
        return True

    def due(self, now: float, scheduled: Iterable[str], gone: Iterable[str] = ()) -> list[Held]:
        """The holds to free now: those whose next turn was scheduled, or left the engine
        unscheduled (`gone`), and those past `release_at`."""
        done = set(scheduled) | set(gone)
        out = []
        for h in list(self._held.values()):
            if h.successor is not None and h.successor in done:
                self.counts["taken_over"] += 1
                out.append(self._pop(h.request_id))
            elif now >= h.release_at:
                self.counts["expired"] += 1
                out.append(self._pop(h.request_id))
        return out

    def victims(self, free_blocks: int, need_blocks: int) -> list[Held]:
        """The holds to free so that `need_blocks` are free: the latest expected return
        first, the holds whose next turn has come last."""
        out: list[Held] = []
        order = sorted(
            self._held.values(), key=lambda h: (h.successor is not None, -h.expected_return)
        )
        for h in order:
            if free_blocks >= need_blocks:
                break
            free_blocks += h.blocks
            self.counts["pressure"] += 1
            out.append(self._pop(h.request_id))
        return out

    def covered(self, request_id: str) -> int:
        """Blocks a session's next turn `request_id` will find held (0 for another)."""
        for h in self._held.values():
            if h.successor == request_id:
                return h.blocks
        return 0

    def release_all(self) -> list[Held]:
        return [self._pop(rid) for rid in list(self._held)]

    def _pop(self, request_id: str) -> Held:
        held = self._held.pop(request_id)
        if self._by_session.get(held.session) == request_id:
            del self._by_session[held.session]
        return held
