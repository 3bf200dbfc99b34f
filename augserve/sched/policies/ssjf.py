"""Speculative shortest-job-first: rank by predicted remaining output (PAPER.md section 6)."""

from __future__ import annotations

from typing import Any

from augserve.core.request import Request
from augserve.sched.policies.base import RankingPolicy, predicted_remaining


class SSJFPolicy(RankingPolicy):
    name = "ssjf"

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        return (predicted_remaining(req), req.queue_time, req.request_id)
