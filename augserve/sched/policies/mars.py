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
from augserve.sched.policies.base import PlanningPolicy
from augserve.sched.spacetime import decode_cost


class MARSPolicy(PlanningPolicy):
    name = "mars"
    needs_after_schedule = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._score: dict[str, float] = {}  # request id -> this round's score
        self._skipped: dict[str, int] = {}  # request id -> iterations runnable, not scheduled
        self._boost: dict[str, int] = {}  # request id -> iterations of front spell left

    def round_score(self, req: Request) -> float:
        before = max(1.0, req.pred_output_len)
        ctx0 = req.num_tokens
        call = req.pred_call_time
        mt_before = decode_cost(ctx0, before, self.tau_iter)
        if call is None:
            return mt_before
        after = before
        ctx = int(ctx0 + before)
        mt_after = decode_cost(ctx, after, self.tau_iter)
        policy = self.planned_policy(req, ctx)
        if policy is ContextPolicy.PRESERVE:
            return mt_before + ctx * call + mt_after
        if policy is ContextPolicy.DISCARD:
            return mt_before + decode_cost(ctx0, before + after, self.tau_iter)
        blocks = -(-ctx // self.config.block_size)
        blocks_per_s = 1.0 / max(self.latency.swap_time(self.config.block_size), 1e-12)
        swap = blocks * blocks / (2.0 * blocks_per_s)
        return mt_before + 2.0 * swap + 0.1 * call + mt_after

    def score(self, request_id: str) -> float:
        return self._score[request_id]

    def on_arrival(self, req: Request, now: float) -> None:
        self._score[req.request_id] = self.round_score(req)

    def on_return(self, req: Request, applied: ContextPolicy, now: float) -> None:
        self._score[req.request_id] = self.round_score(req)

    def forget(self, request_id: str) -> None:
        self._score.pop(request_id, None)
        self._skipped.pop(request_id, None)
        self._boost.pop(request_id, None)

    def preempt_key(self, req: Request) -> tuple[Any, ...]:
        """FCFS among requests holding KV, as MARS runs them (boosts come and go)."""
        return (req.queue_time, req.request_id)

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        rid = req.request_id
        if rid in self._boost:
            return (0, 0.0, req.queue_time, rid)
        if req.status is RequestStatus.RUNNING:
            return (1, 0.0, req.queue_time, rid)
        return (2, self._score[rid], req.queue_time, rid)

    def after_schedule(
        self, candidates: Sequence[Request], scheduled: set[str], now: float
    ) -> None:
        for rid in [rid for rid, left in self._boost.items() if left <= 1]:
            del self._boost[rid]
        for rid in self._boost:
            self._boost[rid] -= 1
        limit, skipped = self.config.mars_starvation_limit, self._skipped
        for r in candidates:
            rid = r.request_id
            if rid in scheduled:
                skipped[rid] = 0
                continue
            skipped[rid] = n = skipped.get(rid, 0) + 1
            if n >= limit and rid not in self._boost:
                self._boost[rid] = self.config.mars_quantum
                skipped[rid] = 0
