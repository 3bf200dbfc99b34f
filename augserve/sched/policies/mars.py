"""MARS: memory-over-time score per round, FCFS among running requests (PAPER.md section 6).

Waiting requests are ordered by their predicted memory-over-time cost for the
current round (lowest first); running requests keep FCFS order ahead of them;
a request skipped `mars_starvation_limit` iterations runs at the front for
`mars_quantum` iterations. DECISION: the output after the call ("after") is
predicted to equal the output before it (the predictor sees one segment).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from augserve.core.request import ContextPolicy, Request, RequestStatus
from augserve.sched.costs import c_decode
from augserve.sched.policies.base import PlanningPolicy


class MARSPolicy(PlanningPolicy):
    name = "mars"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._boost: dict[str, int] = {}  # request id -> iterations of front spell left

    def round_score(self, req: Request) -> float:
        before = max(1.0, req.pred_output_len)
        ctx0 = req.num_tokens
        call = req.pred_call_time
        mt_before = c_decode(ctx0, before, self.tau_iter)
        if call is None:
            return mt_before
        after = before
        ctx = int(ctx0 + before)
        mt_after = c_decode(ctx, after, self.tau_iter)
        policy = self.planned_policy(req, ctx)
        if policy is ContextPolicy.PRESERVE:
            return mt_before + ctx * call + mt_after
        if policy is ContextPolicy.DISCARD:
            return mt_before + c_decode(ctx0, before + after, self.tau_iter)
        blocks = -(-ctx // self.config.block_size)
        blocks_per_s = 1.0 / max(self.cost.swap_time(self.config.block_size), 1e-12)
        swap = blocks * blocks / (2.0 * blocks_per_s)
        return mt_before + 2.0 * swap + 0.1 * call + mt_after

    def on_arrival(self, req: Request, now: float) -> None:
        req.priority = self.round_score(req)

    def on_return(self, req: Request, applied: ContextPolicy, now: float) -> None:
        req.priority = self.round_score(req)

    def preempt_key(self, req: Request) -> tuple[Any, ...]:
        """FCFS among requests holding KV, as MARS runs them (boosts come and go)."""
        return (req.queue_time, req.request_id)

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        if req.request_id in self._boost:
            return (0, 0.0, req.queue_time, req.request_id)
        if req.status is RequestStatus.RUNNING:
            return (1, 0.0, req.queue_time, req.request_id)
        return (2, req.priority, req.queue_time, req.request_id)

    def after_schedule(
        self, candidates: Sequence[Request], scheduled: set[str], now: float
    ) -> None:
        for rid in [rid for rid, left in self._boost.items() if left <= 1]:
            del self._boost[rid]
        for rid in self._boost:
            self._boost[rid] -= 1
        limit = self.config.mars_starvation_limit
        for r in candidates:
            if r.num_skipped >= limit and r.request_id not in self._boost:
                self._boost[r.request_id] = self.config.mars_quantum
                r.num_skipped = 0

    def forget(self, request_id: str) -> None:
        self._boost.pop(request_id, None)
