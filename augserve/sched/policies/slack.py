"""`augserve-slo`: AugServe's value density, served first to requests that can still meet
their SLO (our own policy, beyond the paper; docs/results-own-policy.md).

Every runnable request is in one of two classes, ranked one after the other:

0. feasible: it can still meet its SLO if served from now on (`sched/slo.py`:
   before its TTFT deadline and before the deadline of its normalized
   latency);
1. lost: it cannot. It is still served, never dropped, after every feasible
   request (by AugServe's density, aging included), and its latency is
   reported like any other.

Inside a class the order is AugServe's (value density over the space-time
cost of what remains of the segment, with aging), and so are the context
policy at a call and the dynamic token budget. A waiting request moves from
class 0 to class 1 at its deadline, a time fixed while it waits, so the
persistent queue (`sched/triage.py`) follows it exactly. Preemption under
memory pressure keeps AugServe's non-aging key (the cost): the class does not
decide who may take whose KV.

A rescue reserve (`reserve` requests per second, 0.05 by default; `sched/rescue.py`;
`SchedulerConfig.slo_reserve` overrides it, e.g. `--set slo_reserve=0`) rescues the
oldest lost requests without a first token at that rate: each is ranked before every
other request (by arrival) until it finishes. It keeps the tails over all requests
(P99 normalized latency, the longest quartile's completions) no worse than
AugServe's under sustained overload, for a few percent of goodput
(docs/results-own-policy.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from augserve.core.metrics import SLOConfig
from augserve.core.request import Request
from augserve.sched.policies.augserve import AugServePolicy
from augserve.sched.ranking import HeapQueue, RankQueue
from augserve.sched.rescue import RescueReserve
from augserve.sched.slo import slo_deadline
from augserve.sched.triage import TriageQueue


class SlackPolicy(AugServePolicy):
    name = "augserve-slo"
    defaults = replace(AugServePolicy.defaults, prefix_caching=True)  # one of our additions
    norm_triage = True  # also lost once the normalized-latency SLO is out of reach
    ahead = 1.0  # tokens expected after a predicted call, in units of the segment's rest
    reserve = 0.05  # rescues per second of the oldest lost requests (0: none)
    admit_growth = 0.2  # admission keeps this share of the KV holders' growth free (0: off)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        paper, c = SLOConfig.from_iteration_time(self.latency.decode_iter_time()), self.config
        self.target = SLOConfig(
            paper.norm_latency_slo if c.slo_norm_latency is None else c.slo_norm_latency,
            paper.ttft_slo if c.slo_ttft is None else c.slo_ttft,
        )
        own = self.config.slo_reserve
        rate = self.reserve if own is None else own
        self.rescue = RescueReserve(rate) if rate > 0 else None
        growth = self.admit_growth if c.admit_growth is None else c.admit_growth
        self._growth = growth if growth > 0 else None
        self._queue: TriageQueue | None = None

    def admission_growth(self) -> float | None:
        """Admit a request without KV only beyond this share of the holders' predicted
        growth (`sched/admission.py`; None: off)."""
        return self._growth

    def deadline(self, req: Request) -> float:
        """When the request stops being able to meet its SLO (fixed while it waits)."""
        return slo_deadline(req, self.target, self.latency, self.norm_triage, self.ahead)

    def is_lost(self, req: Request, now: float) -> bool:
        return now >= self.deadline(req)

    def is_rescued(self, req: Request) -> bool:
        return self.rescue is not None and req.request_id in self.rescue.rescued

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        """(class, -theta, queue time, id): feasible requests first, by value density
        (rescued ones before them, lost ones after)."""
        if self.rescue is not None and req.request_id in self.rescue.rescued:
            return (-1, req.arrival_time, req.request_id)
        return (0 if now < self.deadline(req) else 1, *super().key(req, now))

    def by_arrival(self, req: Request, now: float) -> tuple[Any, ...]:
        return (req.arrival_time, req.request_id)

    def make_queue(self) -> RankQueue:
        """Two classes, each a kinetic heap (AugServe's aging density); with a reserve,
        the rescued class before them (by arrival)."""
        self._queue = TriageQueue(
            self.deadline,
            super().make_queue,
            (lambda: HeapQueue(self.by_arrival)) if self.rescue is not None else None,
            self.is_rescued,
        )
        return self._queue

    # --- the reserve ---------------------------------------------------------------------
    def on_arrival(self, req: Request, now: float) -> None:
        super().on_arrival(req, now)
        if self.rescue is not None:
            self.rescue.track(req)

    def forget(self, request_id: str) -> None:
        super().forget(request_id)
        if self.rescue is not None:
            self.rescue.forget(request_id)

    def after_schedule(
        self, candidates: Sequence[Request], scheduled: set[str], now: float
    ) -> None:
        """Rescue the requests the reserve's credit allows (ranked first from now on)."""
        if self.rescue is None:
            return
        for req in self.rescue.due(now, self.is_lost):
            if self._queue is not None:
                self._queue.rescue(req, now)
