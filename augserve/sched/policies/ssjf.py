"""Speculative shortest-job-first: rank by predicted remaining output (PAPER.md section 6)."""

from __future__ import annotations

from collections.abc import Sequence

from augserve.core.request import Request
from augserve.sched.policies.base import RankingPolicy, predicted_remaining


class SSJFPolicy(RankingPolicy):
    name = "ssjf"

    def order(self, reqs: Sequence[Request], now: float) -> list[Request]:
        return sorted(reqs, key=lambda r: (predicted_remaining(r), r.queue_time, r.request_id))
