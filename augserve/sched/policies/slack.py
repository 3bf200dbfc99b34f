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
"""

from __future__ import annotations

from typing import Any

from augserve.core.request import Request
from augserve.sched.policies.augserve import AugServePolicy
from augserve.sched.ranking import RankQueue
from augserve.sched.slo import SLOTarget, slo_deadline
from augserve.sched.triage import TriageQueue


class SlackPolicy(AugServePolicy):
    name = "augserve-slo"
    norm_triage = True  # also lost once the normalized-latency SLO is out of reach
    ahead = 1.0  # tokens expected after a predicted call, in units of the segment's rest

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.target = SLOTarget.for_latency(self.latency)

    def deadline(self, req: Request) -> float:
        """When the request stops being able to meet its SLO (fixed while it waits)."""
        return slo_deadline(req, self.target, self.latency, self.norm_triage, self.ahead)

    def is_lost(self, req: Request, now: float) -> bool:
        return now >= self.deadline(req)

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        """(class, -theta, queue time, id): feasible requests first, by value density."""
        return (1 if now >= self.deadline(req) else 0, *super().key(req, now))

    def make_queue(self) -> RankQueue:
        """Two classes, each a kinetic heap (AugServe's aging density)."""
        return TriageQueue(self.deadline, super().make_queue)
