"""A reserve of service for requests that can no longer meet their SLO (`augserve-slo`).

Triage serves every request that can still meet its SLO before any that
cannot; under sustained overload a lost request may then wait without end
(it is served only when no feasible request can use the batch). The reserve
bounds that: credit accrues at `rate` requests per second of the clock
(at most one rescue's worth is kept), and each unit of credit *rescues* the
oldest lost request that has no first token yet and waits without KV. A
rescued request is ranked before every other one until it finishes: it is
committed, so the service spent on it is not thrown away by later triage.

The reserve decides from the clock and the requests' own state only, once per
iteration after the batch is built, so the scheduler's two ranking modes (sort
every iteration, persistent queue) rescue the same requests at the same time.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from augserve.core.request import Request


class RescueReserve:
    """Requests to rescue, oldest lost first, at most `rate` per second."""

    def __init__(self, rate: float) -> None:
        if not rate > 0:
            raise ValueError(f"RescueReserve.rate must be > 0, got {rate}")
        self.rate = rate
        self.credit = 0.0
        self._last: float | None = None
        self._heap: list[tuple[float, str, Request]] = []  # unstarted, by arrival
        self._live: set[str] = set()
        self.rescued: set[str] = set()
        self.count = 0  # rescues so far (statistics)

    def track(self, req: Request) -> None:
        """A new request: a candidate for rescue until its first token."""
        self._live.add(req.request_id)
        heapq.heappush(self._heap, (req.arrival_time, req.request_id, req))

    def forget(self, request_id: str) -> None:
        self._live.discard(request_id)
        self.rescued.discard(request_id)

    def due(self, now: float, is_lost: Callable[[Request, float], bool]) -> list[Request]:
        """The requests rescued at `now` (credit permitting)."""
        last = now if self._last is None else self._last
        self._last = now
        credit = self.credit + self.rate * max(0.0, now - last)
        self.credit = credit if credit < 1.0 else 1.0
        out: list[Request] = []
        heap = self._heap
        while self.credit >= 1.0 and heap:
            _, rid, req = heap[0]
            if rid not in self._live or req.first_token_time is not None:
                heapq.heappop(heap)  # gone, or started: no longer a candidate
                continue
            if req.block_ids or req.host_block_ids:
                heapq.heappop(heap)  # its prefill is under way: being served
                continue
            if not is_lost(req, now):
                break  # the oldest waiting request can still make it: nothing to rescue
            heapq.heappop(heap)
            self.rescued.add(rid)
            self.credit -= 1.0
            self.count += 1
            out.append(req)
        return out
