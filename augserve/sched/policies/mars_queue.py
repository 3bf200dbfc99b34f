"""MARS's queue of waiting requests (the `RankQueue` of `MARSPolicy`).

The waiting requests' scores all move when the running batch changes (nearly
every iteration), so the queue keeps their round inputs in numpy arrays and
re-scores and re-sorts all of them in one vectorized pass when the running
batch or the membership changed since the last sort. Boosts (`mars_rank.BoostClock`)
change at iterations computed in advance, kept in an event heap.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from augserve.core.request import Request, RequestStatus
from augserve.sched.policies.mars_rank import (
    KINDS,
    BoostClock,
    FloatArray,
    IntArray,
    Round,
    ScoreParams,
    scores,
)
from augserve.sched.ranking import Key, ListScan, QueueScan, RankQueue

BOOSTED, WAITING, DEAD = 2, 3, 9  # key tiers (1: running; DEAD: a free slot)


class MARSQueue(RankQueue):
    """Waiting requests by (boosted first, round score, arrival, id).

    Round inputs sit in numpy arrays by slot (free slots are reused lowest
    first). A sort scores every live slot at the current running batch and
    orders only the top `TOP` (with `argpartition`: boosted requests and every
    score up to the TOP-th); a scan that reads past them gets the full order,
    of which the top is the exact prefix.
    """

    TOP = 32

    def __init__(
        self,
        rounds: dict[str, Round],
        boost: BoostClock,
        chunk: Callable[[], int],
        params: ScoreParams,
        boost_running: bool = False,
    ) -> None:
        self.rounds, self.boost, self.chunk, self.params = rounds, boost, chunk, params
        self.boost_running = boost_running
        self._slot: dict[str, int] = {}
        self._reqs: list[Request | None] = []
        self._free: list[int] = []  # a heap: the lowest free slot first
        self._hw = 0  # slots in use are below this
        # round inputs and key parts by slot
        self._before: IntArray = np.zeros(0, np.int64)
        self._after: IntArray = np.zeros(0, np.int64)
        self._kind: npt.NDArray[np.int8] = np.zeros(0, np.int8)
        self._call: FloatArray = np.zeros(0, np.float64)
        self._complete: npt.NDArray[np.bool_] = np.zeros(0, np.bool_)
        self._tier: npt.NDArray[np.int8] = np.zeros(0, np.int8)
        self._qtime: FloatArray = np.zeros(0, np.float64)
        self._grow(64)
        self._order: list[int] = []  # slots in key order (a prefix while `_partial`)
        self._partial = False
        self._keys: tuple[Any, Any, Any] = ([], [], [])  # tiers, scores, arrivals by slot
        self._dirty = True
        self._chunk = -1
        self._events: list[tuple[int, int, str]] = []  # (iteration, version, request id)
        self._version: dict[str, int] = {}

    def _grow(self, cap: int) -> None:
        """Room for `cap` slots (the arrays copied into larger ones)."""
        old = len(self._reqs)
        self._before = _grown(self._before, cap, np.int64)
        self._after = _grown(self._after, cap, np.int64)
        self._kind = _grown(self._kind, cap, np.int8)
        self._call = _grown(self._call, cap, np.float64)
        self._complete = _grown(self._complete, cap, np.bool_)
        self._tier = _grown(self._tier, cap, np.int8, DEAD)
        self._qtime = _grown(self._qtime, cap, np.float64)
        self._reqs.extend([None] * (cap - old))
        for slot in range(old, cap):
            heapq.heappush(self._free, slot)

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, req: Request) -> bool:
        return req.request_id in self._slot

    def _fill(self, slot: int, req: Request, k: int) -> None:
        r = self.rounds[req.request_id]
        self._before[slot], self._after[slot] = r.before, r.after
        self._kind[slot], self._call[slot] = KINDS[r.policy], r.call
        self._complete[slot], self._qtime[slot] = r.complete, req.queue_time
        self._tier[slot] = BOOSTED if self.boost.is_boosted(req.request_id, k) else WAITING

    def _watch(self, rid: str, k: int) -> None:
        version = self._version[rid] = self._version.get(rid, 0) + 1
        when = self.boost.next_change(rid, k)
        if when is not None:
            heapq.heappush(self._events, (when, version, rid))

    def add(self, req: Request, now: float) -> None:
        self.remove(req)
        rid, k = req.request_id, self.boost.done + 1
        if req.first_scheduled_time is not None:
            self.boost.enter(rid, k)
        if not self._free:
            self._grow(2 * len(self._reqs))
        slot = heapq.heappop(self._free)
        self._hw = max(self._hw, slot + 1)
        self._slot[rid] = slot
        self._reqs[slot] = req
        self._fill(slot, req, k)
        self._watch(rid, k)
        self._dirty = True

    def remove(self, req: Request) -> None:
        rid = req.request_id
        slot = self._slot.pop(rid, None)
        if slot is None:
            return
        self._reqs[slot] = None
        self._tier[slot] = DEAD
        heapq.heappush(self._free, slot)
        self._version.pop(rid, None)
        if req.status is not RequestStatus.WAITING:  # scheduled (or finished)
            self.boost.leave(rid, self.boost.done + 1)

    def advance(self, now: float) -> None:
        chunk = self.chunk()
        if chunk != self._chunk:
            self._chunk, self._dirty = chunk, True
        k = self.boost.done + 1
        events = self._events
        while events and events[0][0] <= k:
            _, version, rid = heapq.heappop(events)
            slot = self._slot.get(rid)
            if slot is None or self._version.get(rid) != version:
                continue
            self._tier[slot] = BOOSTED if self.boost.is_boosted(rid, k) else WAITING
            self._dirty = True
            self._watch(rid, k)

    def _sort(self) -> None:
        hw = self._hw
        score = scores(
            self._before[:hw],
            self._after[:hw],
            self._kind[:hw],
            self._call[:hw],
            self._complete[:hw],
            self._chunk,
            self.params,
        )
        tier = self._tier[:hw]
        if self.boost_running:  # the boosted go ahead of running requests too, by arrival
            boosted = tier == BOOSTED
            tier = np.where(boosted, 0, tier).astype(np.int8)
            score = np.where(boosted, 0.0, score)
        self._keys = (tier, score, self._qtime[:hw])
        waiting = tier == WAITING
        top = self.TOP
        if int(np.count_nonzero(waiting)) > 2 * top:
            w = np.where(waiting, score, np.inf)
            cut = w[np.argpartition(w, top)[:top]].max()
            chosen = np.nonzero((tier < WAITING) | (waiting & (w <= cut)))[0]
            self._order, self._partial = self._ordered(chosen), True
        else:
            self._order, self._partial = self._ordered(np.nonzero(tier != DEAD)[0]), False
        self._dirty = False

    def _ordered(self, slots: Any) -> list[int]:
        """`slots` in key order (ties in tier, score and arrival broken by id)."""
        tier, score, qtime = self._keys
        t, sc, q = tier[slots], score[slots], qtime[slots]
        order = np.lexsort((q, sc, t))
        t, sc, q = t[order], sc[order], q[order]
        out: list[int] = slots[order].tolist()
        if bool(((t[1:] == t[:-1]) & (sc[1:] == sc[:-1]) & (q[1:] == q[:-1])).any()):
            out.sort(key=self._key_of)  # rare: equal arrival times
        return out

    def _key_of(self, slot: int) -> Key:
        tier, score, qtime = self._keys
        req = self._reqs[slot]
        assert req is not None
        return (int(tier[slot]), float(score[slot]), float(qtime[slot]), req.request_id)

    def _extend(self) -> None:
        """The full order, once a scan reads past the sorted top. The sorted top stays
        as it is, slots removed since the sort included (a scan's position counts
        them), and the rest follows it: rebuilding the whole order without the
        removed slots would shift every position after them, and a scan would skip
        as many requests."""
        top = set(self._order)
        rest = self._ordered(np.nonzero(self._keys[0] != DEAD)[0])
        self._order = self._order + [slot for slot in rest if slot not in top]
        self._partial = False

    def scan(self, now: float) -> QueueScan:
        self.advance(now)
        if self._dirty:
            self._sort()
        reqs = self._reqs

        def item(i: int) -> tuple[Key, Request] | None:
            if i >= len(self._order) and self._partial:
                self._extend()
            slot = self._order[i]
            req = reqs[slot]
            if req is None:
                return None  # left the queue since the sort
            return self._key_of(slot), req

        return _GrowingScan(item, lambda: len(self._order) + (1 if self._partial else 0))


def _grown(a: Any, cap: int, dtype: Any, fill: int = 0) -> Any:
    """`a` copied into the front of a new array of `cap` elements (the rest `fill`)."""
    b = np.full(cap, fill, dtype)
    b[: len(a)] = a
    return b


class _GrowingScan(ListScan):
    """A `ListScan` whose length may grow while it is read (a partial order extended)."""

    def __init__(
        self, item: Callable[[int], tuple[Key, Request] | None], size: Callable[[], int]
    ) -> None:
        super().__init__(item, 0)
        self._size_of = size

    def peek(self) -> tuple[Key, Request] | None:
        while self._top is None and self._pos < self._size_of():
            self._top = self._item(self._pos)
            if self._top is None:
                self._pos += 1
        return self._top
