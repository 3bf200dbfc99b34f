"""A persistent queue in two classes: requests that can still meet their SLO, then the rest
(and, with a rescue reserve, a class before both: rescued requests, see `rescue.py`).

A ranking key `(lost, *inner)` with `lost = now >= deadline(req)` changes
class once while a request waits, at a time known when it is queued (its
deadline does not move while it waits without KV, see `slo.py`).
`TriageQueue` keeps the two classes in two inner queues (any `RankQueue`,
keyed by `inner`) and moves a request from the first to the second when the
clock passes its deadline; a scan reads the first class, then the second,
with the class prepended to every key, so it yields exactly the order of
`sorted((lost, *inner))`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from augserve.core.request import Request
from augserve.sched.ranking import Key, QueueScan, RankQueue


class ChainScan(QueueScan):
    """Scans of the classes one after the other, keys prefixed with the class number."""

    def __init__(self, parts: list[tuple[int, QueueScan]]) -> None:
        self._parts = parts
        self._i = 0

    def peek(self) -> tuple[Key, Request] | None:
        parts = self._parts
        while self._i < len(parts):
            cls, scan = parts[self._i]
            top = scan.peek()
            if top is not None:
                return (cls, *top[0]), top[1]
            self._i += 1
        return None

    def pop(self) -> None:
        if self.peek() is not None:
            self._parts[self._i][1].pop()

    def skip_below(self, bound: Key) -> None:
        parts = self._parts
        while self._i < len(parts):
            cls, scan = parts[self._i]
            if cls < bound[0]:  # every key of this class is below the bound
                self._i += 1
                continue
            if cls == bound[0]:
                scan.skip_below(bound[1:])
            return


class TriageQueue(RankQueue):
    """Feasible requests (now < deadline) first, lost ones after, each class in its own
    inner queue; `deadline(req)` must not change while the request is queued."""

    def __init__(
        self,
        deadline: Callable[[Request], float],
        make_inner: Callable[[], RankQueue],
        make_rescued: Callable[[], RankQueue] | None = None,
        is_rescued: Callable[[Request], bool] | None = None,
    ) -> None:
        self.deadline = deadline
        self.feasible = make_inner()
        self.lost = make_inner()
        self.rescued = make_rescued() if make_rescued is not None else None
        self.is_rescued = is_rescued
        self._due: list[tuple[float, int, Request]] = []  # (deadline, seq, request)
        self._seq = 0
        self._filed: dict[str, int] = {}  # request id -> seq of its live deadline entry
        self._now = float("-inf")
        self.moved = 0  # requests that became lost while queued (statistics)

    def __len__(self) -> int:
        n = len(self.feasible) + len(self.lost)
        return n if self.rescued is None else n + len(self.rescued)

    def __contains__(self, req: Request) -> bool:
        return (
            req in self.feasible
            or req in self.lost
            or (self.rescued is not None and req in self.rescued)
        )

    def add(self, req: Request, now: float) -> None:
        self.remove(req)
        self.advance(now)
        if self.rescued is not None and self.is_rescued is not None and self.is_rescued(req):
            self.rescued.add(req, now)
            return
        due = self.deadline(req)
        if due <= self._now:
            self.lost.add(req, now)
            return
        self.feasible.add(req, now)
        self._seq += 1
        self._filed[req.request_id] = self._seq
        heapq.heappush(self._due, (due, self._seq, req))

    def remove(self, req: Request) -> None:
        """Drop `req` (its entry in the deadline heap dies: checked when it comes due)."""
        self._filed.pop(req.request_id, None)
        self.feasible.remove(req)
        self.lost.remove(req)
        if self.rescued is not None:
            self.rescued.remove(req)

    def rescue(self, req: Request, now: float) -> None:
        """`req` was just rescued (`is_rescued(req)` now holds): file it in the first class."""
        if req in self:
            self.add(req, now)

    def advance(self, now: float) -> None:
        """Move the requests whose deadline has passed to the lost class."""
        if now > self._now:
            self._now = now
        due, filed = self._due, self._filed
        while due and due[0][0] <= now:
            _, seq, req = heapq.heappop(due)
            if filed.get(req.request_id) == seq:
                del filed[req.request_id]
                self.feasible.remove(req)
                self.lost.add(req, now)
                self.moved += 1
        self.feasible.advance(now)
        self.lost.advance(now)
        if self.rescued is not None:
            self.rescued.advance(now)

    def scan(self, now: float) -> QueueScan:
        self.advance(now)
        parts = [(0, self.feasible.scan(now)), (1, self.lost.scan(now))]
        if self.rescued is not None:
            parts.insert(0, (-1, self.rescued.scan(now)))
        return ChainScan(parts)
