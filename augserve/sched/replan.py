"""INFERCEPT's re-evaluation of paused requests' context policies (docs/paper.md section 6).

WukLab/InferCept (`_schedule_chunk_and_fill`) chooses again, every iteration,
the context policy of each paused request whose KV is still on device, with
the call's remaining predicted time and the current L_other. A change of plan
only moves the request in or out of the reclaimable set (lazy eviction does
the rest). The parts of the waste that depend on the context alone are cached
per request until its context changes (a partial swap-out).

Elapsed time is evidence (issue 24). With a learning predictor (`OnlineLearner`)
the open call's expected duration is re-estimated from how long it has lasted
(`expected_call_time`, e.g. a log-normal's mean residual life), so a call running
past its prediction keeps a positive remaining time that grows with it, and
Preserve's waste grows until Swap or Discard wins. A call with no prediction at
all (`pred_call_time is None`: an oracle without a plan) is expected to last as
long again as it already has. Without either, a call past its predicted end has
0 s left and stays preserved (as the oracle's plans return exactly on time).
"""

from __future__ import annotations

from augserve.core.latency import LatencyModel
from augserve.core.prediction import OnlineLearner
from augserve.core.request import Request
from augserve.sched.context_policy import choose_from_terms, swap_waste
from augserve.sched.kv_manager import KVCacheManager


class Replanner:
    def __init__(
        self,
        kv: KVCacheManager,
        latency: LatencyModel,
        block_size: int,
        learner: OnlineLearner | None = None,
    ) -> None:
        self.kv = kv
        self.learner = learner
        self.latency = latency
        self.block_size = block_size
        self.allow_swap = kv.pool.num_host_blocks > 0
        self._parts: dict[str, tuple[int, float, float | None]] = {}  # ctx, tau_fwd, Waste_S

    def run(self, now: float, other_tokens: int) -> None:
        """Choose again the policy of every paused request holding device KV."""
        parts, bs, kv = self._parts, self.block_size, self.kv
        for rid, req in kv.in_call.items():
            ctx = len(req.block_ids) * bs if req.host_block_ids else req.num_tokens
            part = parts.get(rid)
            if part is None or part[0] != ctx:
                part = parts[rid] = self._terms(ctx)
            left = self.remaining(req, now)
            policy = choose_from_terms(ctx, left, other_tokens, part[1], part[2])
            if policy is not req.context_policy:
                kv.replan(req, policy)

    def remaining(self, req: Request, now: float) -> float:
        """Seconds the open call is expected to last from `now` (the module doc)."""
        start = req.calls[-1].start
        if self.learner is not None:
            req.pred_call_time = self.learner.expected_call_time(req, now)
        elif req.pred_call_time is None:
            return now - start if now > start else 0.0
        left = start + req.pred_call_time - now
        return left if left > 0.0 else 0.0

    def forget(self, request_id: str) -> None:
        """The request left its call."""
        self._parts.pop(request_id, None)

    def _terms(self, ctx: int) -> tuple[int, float, float | None]:
        swap = swap_waste(ctx, self.latency) if self.allow_swap else None
        return ctx, self.latency.prefill_time(ctx), swap
