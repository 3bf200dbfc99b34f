"""A kinetic heap for AugServe's aging key (the `RankQueue` of `AugServePolicy`).

A waiting request's value density (1 + beta' (t - s)) / C grows linearly in
time, each request at its own rate, so two waiting requests change order only
when their lines cross. A kinetic heap (Basch, Guibas and Hershberger's
kinetic data structures) keeps, for every parent-child pair, the time the
child overtakes its parent, and swaps them when the clock passes it: the heap
is exact at every `now`, with work only at crossings. Every comparison uses the
exact key a sort would use at that time, so rounding in a crossing time can
only make a certificate fire early (it is then re-checked later), never let an
inverted pair stand: see `KineticQueue.advance`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from augserve.core.request import Request
from augserve.sched.ranking import Key, QueueScan, RankQueue

_ROUNDING = 1e-13  # ~450 ulps: a generous bound on the relative rounding


class _Line:
    """A queued request's value v(t) = (1 + bk (t - s)) / C and its tie-breakers."""

    __slots__ = ("cost", "cert", "pos", "qtime", "req", "rid", "since")

    def __init__(self, req: Request, since: float, cost: float) -> None:
        self.req = req
        self.rid = req.request_id
        self.qtime = req.queue_time
        self.since = since
        self.cost = cost
        self.pos = -1
        self.cert = 0  # version of this node's certificate against its parent


class KineticQueue(RankQueue):
    """Max value density first, exactly, with values that grow linearly in time.

    The key of a request at time t is `(-(1 + bk (t - s)) / C, queue_time, id)`
    with s its last-scheduled time and C its cost (both fixed while it waits),
    the same float expression as `AugServePolicy.key`. A child overtakes its
    parent only if its slope bk / C is larger, at the time the two lines
    cross; that time is the pair's certificate, kept in an event heap. At
    `advance(t)` the certificates due by t are checked with the exact keys at t
    and the inverted pairs swapped (each swap renews the few certificates
    around it), so the heap is valid at t for the very keys a sort would use.
    """

    _MARGIN = 1e-6  # certificates due within this many seconds are checked early

    def __init__(self, bk: float, cost: Callable[[Request], float]) -> None:
        self.bk = bk  # beta per second: beta (per ms) * 1000, as `scheduling_value`
        self.cost = cost
        self._heap: list[_Line] = []
        self._lines: dict[str, _Line] = {}
        self._events: list[tuple[float, int, int, _Line]] = []  # (time, version, seq, line)
        self._seq = 0
        self.now = float("-inf")
        self.swaps = 0  # kinetic events that swapped a pair (statistics)

    def __len__(self) -> int:
        return len(self._lines)

    def __contains__(self, req: Request) -> bool:
        return req.request_id in self._lines

    # --- keys --------------------------------------------------------------------------
    def _key(self, line: _Line, t: float) -> Key:
        return (-((1.0 + self.bk * (t - line.since)) / line.cost), line.qtime, line.rid)

    def _crossing(self, parent: _Line, child: _Line) -> float | None:
        """When `child` may overtake `parent` (None: never; its line is not steeper).

        The lines meet at t = (cp sc - cc sp) / (cp - cc) - 1 / bk. The time is
        moved earlier by a bound on the rounding of both that formula and the float
        keys the sort compares (a few ulps of each term, over cp - cc, which is exact
        for close costs), so a certificate never fires after the float keys invert;
        one that fires before is re-checked at each later `advance` until they do.
        """
        cp, cc, bk = parent.cost, child.cost, self.bk
        if cc >= cp or bk <= 0.0:
            return None
        gap = cp - cc
        when = (cp * child.since - cc * parent.since) / gap - 1.0 / bk
        spread = abs(child.since) + abs(parent.since) + abs(when) + 1.0 / bk
        return when - self._MARGIN - _ROUNDING * cp * spread / gap

    def _certify(self, pos: int) -> None:
        """Renew the certificate of the node at `pos` against its parent."""
        if pos <= 0 or pos >= len(self._heap):
            return
        child = self._heap[pos]
        child.cert += 1
        when = self._crossing(self._heap[(pos - 1) // 2], child)
        if when is not None:
            self._seq += 1
            heapq.heappush(self._events, (when, child.cert, self._seq, child))

    def _certify_around(self, pos: int) -> None:
        self._certify(pos)
        self._certify(2 * pos + 1)
        self._certify(2 * pos + 2)

    # --- heap moves (at time self.now) ------------------------------------------------
    def _place(self, line: _Line, pos: int) -> None:
        self._heap[pos] = line
        line.pos = pos

    def _swap(self, i: int, j: int) -> None:
        a, b = self._heap[i], self._heap[j]
        self._place(b, i)
        self._place(a, j)

    def _sift_up(self, pos: int) -> list[int]:
        moved = [pos]
        t = self.now
        while pos > 0:
            parent = (pos - 1) // 2
            if self._key(self._heap[pos], t) < self._key(self._heap[parent], t):
                self._swap(pos, parent)
                pos = parent
                moved.append(pos)
            else:
                break
        return moved

    def _sift_down(self, pos: int) -> list[int]:
        moved = [pos]
        t, heap, n = self.now, self._heap, len(self._heap)
        while True:
            best = pos
            for c in (2 * pos + 1, 2 * pos + 2):
                if c < n and self._key(heap[c], t) < self._key(heap[best], t):
                    best = c
            if best == pos:
                return moved
            self._swap(pos, best)
            pos = best
            moved.append(pos)

    # --- the queue -----------------------------------------------------------------------
    def advance(self, now: float) -> None:
        if now <= self.now:
            return
        self.now = now
        events, heap, t = self._events, self._heap, now
        deferred: list[tuple[float, int, int, _Line]] = []
        while events and events[0][0] <= t + self._MARGIN:
            ev = heapq.heappop(events)
            child = ev[3]
            pos = child.pos
            if ev[1] != child.cert or pos <= 0:
                continue  # superseded
            parent = (pos - 1) // 2
            top = self._key(heap[parent], t)
            if self._key(child, t) < top:
                # the parent goes down below the better of its two children at t (with
                # ties broken by queue time, both may have passed it together)
                sibling = 4 * parent + 3 - pos  # the other child of `parent`
                best = pos
                if sibling < len(heap) and self._key(heap[sibling], t) < self._key(child, t):
                    best, sibling = sibling, pos
                self._swap(best, parent)
                self.swaps += 1
                self._certify_around(best)  # the old parent, now below
                self._certify(parent)  # the best child, now above
                self._certify(sibling)
            else:
                deferred.append(ev)  # due within the margin (or rounding): look again later
        for ev in deferred:
            heapq.heappush(events, ev)

    def add(self, req: Request, now: float) -> None:
        self.remove(req)
        self.advance(now)
        line = _Line(req, req.last_scheduled_time, self.cost(req))
        self._lines[line.rid] = line
        self._heap.append(line)
        line.pos = len(self._heap) - 1
        for pos in self._sift_up(line.pos):
            self._certify_around(pos)

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
        moved = self._sift_up(pos)
        if len(moved) == 1:
            moved = self._sift_down(pos)
        for p in moved:
            self._certify_around(p)

    def scan(self, now: float) -> QueueScan:
        self.advance(now)
        return _KineticScan(self, max(now, self.now))

    def check(self, now: float) -> None:
        """Assert the heap property at `now` (tests)."""
        self.advance(now)
        t = max(now, self.now)
        for pos in range(1, len(self._heap)):
            parent = self._heap[(pos - 1) // 2]
            assert self._key(parent, t) < self._key(self._heap[pos], t), f"inverted at {pos}"
            assert self._heap[pos].pos == pos


class _KineticScan(QueueScan):
    """A scan of a kinetic heap at time t, with a cheaper `skip_below` (it compares the
    float value first and builds a key tuple only on a tie)."""

    def __init__(self, queue: KineticQueue, t: float) -> None:
        heap, key = queue._heap, queue._key
        self._lines, self._t, self._bk = heap, t, queue.bk

        def keyed(pos: int) -> tuple[Key, Request]:
            line = heap[pos]
            return key(line, t), line.req

        super().__init__(keyed, len(heap))

    def skip_below(self, bound: Key) -> None:
        frontier, size = self._frontier, self._size
        stack: list[int] = []
        while frontier and frontier[0][0] < bound:
            pos = heapq.heappop(frontier)[1]
            stack += (2 * pos + 1, 2 * pos + 2)
        lines, t, bk, b0 = self._lines, self._t, self._bk, bound[0]
        while stack:
            pos = stack.pop()
            if pos >= size:
                continue
            line = lines[pos]
            v = -((1.0 + bk * (t - line.since)) / line.cost)
            if v < b0 or (v == b0 and (v, line.qtime, line.rid) < bound):
                stack += (2 * pos + 1, 2 * pos + 2)
            else:
                heapq.heappush(frontier, ((v, line.qtime, line.rid), pos, line.req))
