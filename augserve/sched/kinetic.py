"""A kinetic heap for AugServe's aging key (the `RankQueue` of `AugServePolicy`).

A waiting request's value density (1 + beta' (t - s)) / C grows linearly in
time, each request at its own rate, so two waiting requests change order only
when their lines cross. A kinetic heap (Basch, Guibas and Hershberger's
kinetic data structures) keeps, for every parent-child pair, the time the
child overtakes its parent, and swaps them when the clock passes it: the heap
is exact at every `now`, with work only at crossings.

Exact means: the order a sort by the float keys gives. Every comparison uses
those keys; a certificate fires early by a bound on the rounding of its
crossing time and is looked at again until the keys invert; the certificates
due in one `advance` are replayed in time order (a crossing found late must
not be decided with keys of a later time while other pairs are still
pending); and a pair formed by moves at time tau is checked at tau at once
(lines that never cross, as two of equal cost ordered by queue time and id,
get no certificate). `tests/sched/test_ranking.py` holds it to a sort,
nearly parallel lines and simultaneous crossings included.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np

from augserve.core.request import Request
from augserve.sched.kinetic_scan import KineticScan, Line
from augserve.sched.ranking import Key, QueueScan, RankQueue

Event = tuple[float, int, int, Line, float, float]  # time, version, seq, line, cross, slack

_ROUNDING = 1e-13  # ~450 ulps: a generous bound on the relative rounding


class KineticQueue(RankQueue):
    """Max value density first, exactly, with values that grow linearly in time.

    The key of a request at time t is `(-(1 + bk (t - s)) / C, queue_time, id)`
    with s its last-scheduled time and C its cost (both fixed while it waits),
    the same float expression as `AugServePolicy.key`. A child overtakes its
    parent only if its slope bk / C is larger, at the time the two lines
    cross; that time, moved earlier by a bound on its rounding, is the pair's
    certificate, kept in an event heap. `advance(t)` replays the certificates
    due by t in time order, each at its own time tau (so every other pair is
    valid at tau and a swap there is a plain heap swap): an inverted pair is
    swapped and the few certificates around it renewed; a pair not inverted yet
    (the certificate is early by design) is looked at again at its crossing,
    at the end of its rounding bound, and at t itself. The heap is then valid at
    t for the very keys a sort would use.
    """

    _MARGIN = 1e-6  # seconds: certificates fire at least this early

    def __init__(self, bk: float, cost: Callable[[Request], float]) -> None:
        self.bk = bk  # beta per second: beta (per ms) * 1000, as `scheduling_value`
        self.cost = cost
        self._heap: list[Line] = []
        # each heap position's s and C, for a vectorized `KineticScan.skip_below`
        self.since = np.zeros(64)
        self.costs = np.ones(64)
        self._lines: dict[str, Line] = {}
        self._events: list[Event] = []
        self._seq = 0
        self.now = float("-inf")
        self.swaps = 0  # kinetic events that swapped a pair (statistics)

    def __len__(self) -> int:
        return len(self._lines)

    def __contains__(self, req: Request) -> bool:
        return req.request_id in self._lines

    # --- keys --------------------------------------------------------------------------
    def _key(self, line: Line, t: float) -> Key:
        return (-((1.0 + self.bk * (t - line.since)) / line.cost), line.qtime, line.rid)

    def _before(self, a: Line, b: Line, t: float) -> bool:
        """`_key(a, t) < _key(b, t)`, without building the tuples unless the values tie."""
        bk = self.bk
        va = -((1.0 + bk * (t - a.since)) / a.cost)
        vb = -((1.0 + bk * (t - b.since)) / b.cost)
        if va != vb:
            return va < vb
        return (a.qtime, a.rid) < (b.qtime, b.rid)

    def _crossing(self, parent: Line, child: Line) -> tuple[float, float] | None:
        """When `child` overtakes `parent`, and a bound on the rounding of that time
        (None: never; its line is not steeper).

        The lines meet at t = (cp sc - cc sp) / (cp - cc) - 1 / bk. The bound covers
        both that formula and the float keys the sort compares: a few hundred ulps
        of each term, over cp - cc (exact for close costs, by Sterbenz's lemma).
        """
        cp, cc, bk = parent.cost, child.cost, self.bk
        if cc >= cp or bk <= 0.0:
            return None
        gap = cp - cc
        when = (cp * child.since - cc * parent.since) / gap - 1.0 / bk
        spread = abs(child.since) + abs(parent.since) + abs(when) + 1.0 / bk
        return when, self._MARGIN + _ROUNDING * cp * spread / gap

    def _certify(self, pos: int, tau: float) -> None:
        """Renew the certificate of the node at `pos` against its parent, a pair formed
        or confirmed at `tau`: an event at the earliest time the float keys may invert,
        or at tau itself if they already are (a pair just formed by moves at tau, with
        lines that never cross: equal costs, ordered by queue time and id)."""
        if pos <= 0 or pos >= len(self._heap):
            return
        heap = self._heap
        child, parent = heap[pos], heap[(pos - 1) // 2]
        child.cert += 1
        got = self._crossing(parent, child)
        early = got[0] - got[1] if got is not None else None
        if (early is None or early > tau) and self._before(child, parent, tau):
            early = tau
        if early is not None:
            cross, slack = got if got is not None else (tau, 0.0)
            self._push(early, child, cross, slack)

    def _certify_around(self, moved: list[int], tau: float) -> None:
        """Renew the certificates of every moved node and of its children, once each
        (a path's next node is the child of the one before)."""
        done: set[int] = set()
        for pos in moved:
            for p in (pos, 2 * pos + 1, 2 * pos + 2):
                if p not in done:
                    done.add(p)
                    self._certify(p, tau)

    def _push(self, time: float, line: Line, cross: float, slack: float) -> None:
        self._seq += 1
        heapq.heappush(self._events, (time, line.cert, self._seq, line, cross, slack))

    # --- heap moves (at time self.now) ------------------------------------------------
    def _place(self, line: Line, pos: int) -> None:
        self._heap[pos] = line
        line.pos = pos
        self.since[pos] = line.since
        self.costs[pos] = line.cost

    def _swap(self, i: int, j: int) -> None:
        a, b = self._heap[i], self._heap[j]
        self._place(b, i)
        self._place(a, j)

    def _sift_up(self, pos: int, t: float) -> list[int]:
        """Move the line at `pos` up while it beats its parent at `t`; the positions
        it passed through."""
        moved = [pos]
        while pos > 0:
            parent = (pos - 1) // 2
            if self._before(self._heap[pos], self._heap[parent], t):
                self._swap(pos, parent)
                pos = parent
                moved.append(pos)
            else:
                break
        return moved

    def _sift_down(self, pos: int, t: float) -> list[int]:
        """Move the line at `pos` down below the better child while one beats it at `t`."""
        moved = [pos]
        heap, n = self._heap, len(self._heap)
        while True:
            best = pos
            for c in (2 * pos + 1, 2 * pos + 2):
                if c < n and self._before(heap[c], heap[best], t):
                    best = c
            if best == pos:
                return moved
            self._swap(pos, best)
            pos = best
            moved.append(pos)

    # --- the queue -----------------------------------------------------------------------
    def advance(self, now: float) -> None:
        """Replay the certificates due by `now`, in time order (see the class doc)."""
        tau, t = self.now, max(now, self.now)
        self.now = t
        events = self._events
        while events and events[0][0] <= t:
            when, version, _, child, cross, slack = heapq.heappop(events)
            if version != child.cert or child.pos <= 0:
                continue  # superseded
            tau = min(t, max(tau, when))
            if self._inverted(child, tau):
                self._swap_up(child.pos, tau)
            elif slack > 0.0:  # not yet: look again (pairs that never cross are done)
                self._push(_retry(tau, t, cross, slack), child, cross, slack)

    def _inverted(self, child: Line, tau: float) -> bool:
        parent = self._heap[(child.pos - 1) // 2]
        return self._before(child, parent, tau)

    def _swap_up(self, pos: int, tau: float) -> None:
        """The child at `pos` passed its parent at `tau`: the parent sifts down at tau
        (below the better of its children, and on), then whatever took its place sifts
        up at tau (two crossings at the same instant, or lines equal in value and
        ordered by queue time and id, can leave it ahead of its new parent too)."""
        parent = (pos - 1) // 2
        moved = self._sift_down(parent, tau)
        moved += self._sift_up(parent, tau)[1:]
        self.swaps += len(moved) - 1
        self._certify_around(moved, tau)

    def add(self, req: Request, now: float) -> None:
        self.remove(req)
        self.advance(now)
        line = Line(req, req.last_scheduled_time, self.cost(req))
        self._lines[line.rid] = line
        pos = len(self._heap)
        if pos == len(self.since):
            self.since = np.concatenate((self.since, np.zeros(pos)))
            self.costs = np.concatenate((self.costs, np.ones(pos)))
        self._heap.append(line)
        self._place(line, pos)
        self._certify_around(self._sift_up(pos, self.now), self.now)

    def remove(self, req: Request) -> None:
        line = self._lines.pop(req.request_id, None)
        if line is None:
            return
        pos, last = line.pos, self._heap.pop()
        line.pos = -1
        line.cert += 1
        if last is line:
            return
        self._place(last, pos)
        moved = self._sift_up(pos, self.now)
        if len(moved) == 1:
            moved = self._sift_down(pos, self.now)
        self._certify_around(moved, self.now)

    def scan(self, now: float) -> QueueScan:
        self.advance(now)
        return KineticScan(self._heap, self.since, self.costs, self.bk, max(now, self.now))

    def check(self, now: float) -> None:
        """Assert the heap property at `now` (tests)."""
        self.advance(now)
        t = max(now, self.now)
        for pos in range(1, len(self._heap)):
            parent = self._heap[(pos - 1) // 2]
            assert self._key(parent, t) < self._key(self._heap[pos], t), f"inverted at {pos}"
            assert self._heap[pos].pos == pos


def _retry(tau: float, t: float, cross: float, slack: float) -> float:
    """When to look again at a pair not inverted at `tau`: at its computed crossing,
    then at the end of the rounding bound, then ever later; and at `t` (the time
    being advanced to) before anything later, so that the pair is valid at t."""
    if tau < cross:
        nxt = cross
    elif tau < cross + slack:
        nxt = cross + slack
    else:
        nxt = tau + slack + 1e-9 * abs(tau)
    return t if tau < t < nxt else nxt
