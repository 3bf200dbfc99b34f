"""A queued request's line in the kinetic heap, and the scan of that heap at one time.

`KineticScan` reads the heap of `kinetic.py` in key order at time t, as every
`QueueScan` does. Its `skip_below(bound)` drops every request keyed below the
bound: the packer calls it when memory frees again after it passed the waiting
requests over, and under overload that is nearly the whole queue, every
iteration. The dropped requests are the top of the heap (a node below the
bound has every ancestor below it too), so the walk is replaced, on large
heaps, by one vectorized pass over the keys of all positions: a node stays in
the scan's frontier iff it is not dropped and its parent is. The float values
are the same IEEE operations, in the same order, as `KineticQueue._key`, so the
frontier, and every key read from it, is bit for bit what the walk gives.
"""

from __future__ import annotations

import heapq

import numpy as np
import numpy.typing as npt

from augserve.core.request import Request
from augserve.sched.ranking import Key, QueueScan

_WALK_LIMIT = 16  # nodes a walk looks at before it hands over to the vectorized pass


_PARENTS = np.zeros(0, dtype=np.intp)


def _parents(n: int) -> npt.NDArray[np.intp]:
    """The parent of every heap position 1..n-1."""
    global _PARENTS
    if n <= 1:
        return _PARENTS[:0]
    if len(_PARENTS) < n - 1:
        _PARENTS = (np.arange(1, 2 * n, dtype=np.intp) - 1) >> 1
    return _PARENTS[: n - 1]


class Line:
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


class KineticScan(QueueScan):
    """A scan of a kinetic heap at time t. `since` and `costs` hold each heap position's
    s and C (the first `len(lines)` entries are valid)."""

    def __init__(
        self,
        lines: list[Line],
        since: npt.NDArray[np.float64],
        costs: npt.NDArray[np.float64],
        bk: float,
        t: float,
    ) -> None:
        self._lines, self._since, self._costs, self._t, self._bk = lines, since, costs, t, bk
        self._popped: list[int] = []  # heap positions popped by this scan
        self._bound: Key | None = None  # the highest bound skipped to
        self._values: npt.NDArray[np.float64] | None = None  # every position's value at t

        def keyed(pos: int) -> tuple[Key, Request]:
            line = lines[pos]
            return (-((1.0 + bk * (t - line.since)) / line.cost), line.qtime, line.rid), line.req

        super().__init__(keyed, len(lines))

    def pop(self) -> None:
        if self._frontier:
            self._popped.append(self._frontier[0][1])
        super().pop()

    def skip_below(self, bound: Key) -> None:
        if self._bound is not None and bound < self._bound:
            bound = self._bound  # nothing below the highest bound is left anyway
        self._bound = bound
        frontier = self._frontier
        if not frontier or not frontier[0][0] < bound:
            return
        if not self._walk(bound, _WALK_LIMIT):
            self._vector_skip(bound)

    def _walk(self, bound: Key, limit: int) -> bool:
        """Node by node, down from every frontier node below the bound (a float
        comparison first, a key tuple only on a tie). False, with the frontier half
        updated, once `limit` nodes were looked at: a pass over all is cheaper then."""
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
            limit -= 1
            if limit < 0:
                return False
            line = lines[pos]
            v = -((1.0 + bk * (t - line.since)) / line.cost)
            if v < b0 or (v == b0 and (v, line.qtime, line.rid) < bound):
                stack += (2 * pos + 1, 2 * pos + 2)
            else:
                heapq.heappush(frontier, ((v, line.qtime, line.rid), pos, line.req))
        return True

    def _vector_skip(self, bound: Key) -> None:
        """All positions at once: dropped = below the bound or popped; the frontier is
        every position not dropped whose parent is (or the root, if not dropped)."""
        n, lines, b0 = self._size, self._lines, bound[0]
        values = self._values
        if values is None:  # t is fixed for the scan, and so are the positions
            values = -((1.0 + self._bk * (self._t - self._since[:n])) / self._costs[:n])
            self._values = values
        dropped = values < b0
        ties = values == b0
        if np.count_nonzero(ties):
            for pos in ties.nonzero()[0].tolist():
                line = lines[pos]
                dropped[pos] = (b0, line.qtime, line.rid) < bound
        if self._popped:
            dropped[self._popped] = True
        keep = ~dropped
        keep[1:] &= dropped[_parents(n)]
        where = keep.nonzero()[0]
        frontier: list[tuple[Key, int, Request | None]] = []
        for pos, v in zip(where.tolist(), values[where].tolist(), strict=True):
            line = lines[pos]
            frontier.append(((v, line.qtime, line.rid), pos, line.req))
        heapq.heapify(frontier)
        self._frontier = frontier
