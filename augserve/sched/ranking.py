"""Persistent queues of the runnable requests that hold no KV, in policy order.

Under overload thousands of requests wait without KV; keying and sorting all
of them every iteration made a saturated run O(queue) per iteration. A
policy's queue keeps them ordered between iterations instead:

- `HeapQueue`: keys that do not change while a request waits (FCFS, SSJF,
  vLLM; MARS re-keys its entries itself). A binary heap with lazy deletion.
- `KineticQueue` (`kinetic.py`): AugServe's value density, which grows
  linearly in time at a rate of its own for each request.

Both are read with `scan(now)`: a best-first walk over the heap (a small
frontier heap of candidates), yielding `(key, request)` in exactly the order
of `sorted(key(r, now))`, without popping anything.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from augserve.core.request import Request

Key = tuple[Any, ...]
KeyFn = Callable[[Request, float], Key]


class QueueScan:
    """Requests of a queue in key order, read lazily (peek / pop)."""

    def __init__(self, keyed: Callable[[int], tuple[Key, Request] | None], size: int) -> None:
        self._keyed = keyed  # heap position -> (key, request), or None if the slot is dead
        self._size = size
        self._frontier: list[tuple[Key, int, Request | None]] = []
        self._push(0)

    def _push(self, pos: int) -> None:
        if pos < self._size:
            got = self._keyed(pos)
            if got is None:  # a dead slot: expand it first, its children may be alive
                heapq.heappush(self._frontier, ((), pos, None))  # () sorts before every key
            else:
                heapq.heappush(self._frontier, (got[0], pos, got[1]))

    def _settle(self) -> None:
        frontier = self._frontier
        while frontier and frontier[0][2] is None:
            _, pos, _ = heapq.heappop(frontier)
            self._push(2 * pos + 1)
            self._push(2 * pos + 2)

    def peek(self) -> tuple[Key, Request] | None:
        self._settle()
        if not self._frontier:
            return None
        key, _, req = self._frontier[0]
        assert req is not None
        return key, req

    def pop(self) -> None:
        self._settle()
        _, pos, _ = heapq.heappop(self._frontier)
        self._push(2 * pos + 1)
        self._push(2 * pos + 2)

    def skip_below(self, bound: Key) -> None:
        """Drop every request whose key is below `bound`. They form the top of the heap:
        walked depth-first, with no frontier heap work, down to the first keys >= bound."""
        frontier, keyed, size = self._frontier, self._keyed, self._size
        stack: list[int] = []
        while frontier and (frontier[0][2] is None or frontier[0][0] < bound):
            pos = heapq.heappop(frontier)[1]
            stack += (2 * pos + 1, 2 * pos + 2)
        while stack:
            pos = stack.pop()
            if pos >= size:
                continue
            got = keyed(pos)
            if got is None or got[0] < bound:
                stack += (2 * pos + 1, 2 * pos + 2)
            else:
                heapq.heappush(frontier, (got[0], pos, got[1]))


class ListScan(QueueScan):
    """Requests already sorted: position i of `item` is (key, request), or None once the
    request has left the queue."""

    def __init__(self, item: Callable[[int], tuple[Key, Request] | None], size: int) -> None:
        self._item = item
        self._size = size
        self._pos = 0
        self._top: tuple[Key, Request] | None = None

    def peek(self) -> tuple[Key, Request] | None:
        while self._top is None and self._pos < self._size:
            self._top = self._item(self._pos)
            if self._top is None:
                self._pos += 1
        return self._top

    def pop(self) -> None:
        if self.peek() is not None:
            self._top = None
            self._pos += 1

    def skip_below(self, bound: Key) -> None:
        while (top := self.peek()) is not None and top[0] < bound:
            self.pop()


class RankQueue(ABC):
    """The interface the scheduler and the packer use."""

    @abstractmethod
    def add(self, req: Request, now: float) -> None: ...

    @abstractmethod
    def remove(self, req: Request) -> None:
        """Drop `req` if it is queued."""
        ...

    def advance(self, now: float) -> None:  # noqa: B027 (a no-op unless keys move)
        """Bring the order to `now` (called at the start of every iteration)."""

    @abstractmethod
    def scan(self, now: float) -> QueueScan: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __contains__(self, req: Request) -> bool: ...

    def ordered(self, now: float) -> list[Request]:
        """Every queued request in key order (tests)."""
        scan, out = self.scan(now), []
        while (top := scan.peek()) is not None:
            out.append(top[1])
            scan.pop()
        return out


class HeapQueue(RankQueue):
    """A heap of `(key, request)` with lazy deletion, for keys that do not age.

    `rekey` replaces a request's key (the old entry dies); `stale()` marks every
    key out of date, and the next `scan` recomputes them all (MARS, whose score
    depends on the running batch).
    """

    def __init__(self, key: KeyFn) -> None:
        self.key = key
        self._heap: list[list[Any]] = []  # [key, seq, request, alive]: seq breaks ties
        self._seq = 0  # with the dead entry of a re-keyed request
        self._entry: dict[str, list[Any]] = {}
        self._stale = False

    def __len__(self) -> int:
        return len(self._entry)

    def __contains__(self, req: Request) -> bool:
        return req.request_id in self._entry

    def add(self, req: Request, now: float) -> None:
        self._put(req, now)

    def remove(self, req: Request) -> None:
        self._drop(req.request_id)

    def rekey(self, req: Request, now: float) -> None:
        """The request's key changed: queue it under the new one."""
        if req.request_id in self._entry:
            self._put(req, now)

    def _put(self, req: Request, now: float) -> None:
        self._drop(req.request_id)
        self._seq += 1
        entry = [self.key(req, now), self._seq, req, True]
        self._entry[req.request_id] = entry
        if not self._stale:
            heapq.heappush(self._heap, entry)

    def _drop(self, rid: str) -> None:
        entry = self._entry.pop(rid, None)
        if entry is not None:
            entry[3] = False
            if len(self._heap) > 64 and len(self._heap) > 2 * len(self._entry):
                self._rebuild(None)

    def stale(self) -> None:
        self._stale = True

    def _rebuild(self, now: float | None) -> None:
        entries = list(self._entry.values())
        if now is not None:
            key = self.key
            for e in entries:
                e[0] = key(e[2], now)
        self._heap = entries
        heapq.heapify(self._heap)

    def scan(self, now: float) -> QueueScan:
        if self._stale:
            self._rebuild(now)
            self._stale = False
        heap = self._heap
        while heap and not heap[0][3]:  # requests admitted or re-keyed leave dead tops
            heapq.heappop(heap)

        def keyed(pos: int) -> tuple[Key, Request] | None:
            entry = heap[pos]
            return (entry[0], entry[2]) if entry[3] else None

        return QueueScan(keyed, len(heap))
