"""MARS, as the `V2` policy of mars-repository/mars-codebase computes it (docs/paper.md section 6).

Order: running requests first, FCFS by arrival; then waiting requests that
waited long (the anti-starvation boost), by score; then every other waiting
or swapped request by its round score (`mars_rank.py`), lowest first.

The round's inputs are fixed on arrival and at each return (V2's `classify`):
the original prompt, the predicted tokens before the call, the returned
tokens, the predicted call time and the context policy. The score itself is
recomputed every iteration, as V2 sorts with the current running batch (the
tokens the running requests compute next: 1 per decoding request, the rest of
a chunked prefill). The context policy is the min-waste one the scheduler will
apply at the call (INFERCEPT's waste; MARS's own classifier weighs the same
three options with constants fitted to its GPU).

Anti-starvation (`mars_rank.BoostClock`): a waiting request that has run
before and is skipped `mars_starvation_limit` (100) iterations goes ahead of
the other waiting requests, never of running ones, for `mars_quantum`
(100,000, `exps/6B_bench.sh`) iterations. A request that has never run is not
counted, as in V2 (its `time_before_processing` is still unset).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from augserve.core.request import ContextPolicy, Request, RequestStatus
from augserve.sched.policies.base import PAPER_DEFAULTS, PlanningPolicy
from augserve.sched.policies.mars_queue import BOOSTED, WAITING, MARSQueue
from augserve.sched.policies.mars_rank import (
    BLOCK,
    CHUNK,
    BoostClock,
    Round,
    ScoreParams,
    blocks_of,
    score,
)
from augserve.sched.ranking import RankQueue

_RUNNING = 1


class MARSPolicy(PlanningPolicy):
    name = "mars"
    defaults = PAPER_DEFAULTS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cfg = self.config
        self._round: dict[str, Round] = {}
        self.boost = BoostClock(cfg.mars_starvation_limit, cfg.mars_quantum)
        rate = cfg.mars_swap_rate
        self.params = ScoreParams(
            block_triangle=cfg.mars_block_triangle,
            tau_iter=self.tau_iter,
            swap_rate=rate if rate is not None else 1.0 / self.latency.swap_time(BLOCK),
        )

    # --- the round score --------------------------------------------------------------
    def classify(self, req: Request) -> Round:
        """The round's inputs, from the prediction (V2's `classify` and `get_priority`)."""
        interval = max(1.0, req.pred_output_len)
        complete = req.pred_call_time is None
        returned = 0.0 if complete or not self.config.mars_after_returned else req.pred_return_len
        planned = self.planned_policy(req, int(req.num_tokens + interval))
        return Round(
            before=blocks_of(req.prompt_len + interval),
            after=blocks_of(interval + returned),
            policy=ContextPolicy.PRESERVE if planned is None else planned,
            call=req.pred_call_time or 0.0,
            complete=complete,
        )

    def chunk(self) -> int:
        """c = max(384 - running batch, 1)."""
        running_batch = getattr(self.load, "running_batch", None)
        batch = running_batch() if running_batch is not None else 0
        return max(CHUNK - batch, 1)

    def score_at(self, request_id: str, chunk: int) -> float:
        return score(self._round[request_id], chunk, self.params)

    def score(self, request_id: str) -> float:
        """The round score with the current running batch."""
        return self.score_at(request_id, self.chunk())

    # --- hooks -----------------------------------------------------------------------------
    def on_arrival(self, req: Request, now: float) -> None:
        self._round[req.request_id] = self.classify(req)

    def on_call(self, req: Request, now: float) -> None:
        self.boost.reset(req.request_id)  # a call resets the starvation state

    def on_return(self, req: Request, applied: ContextPolicy, now: float) -> None:
        self._round[req.request_id] = self.classify(req)

    def forget(self, request_id: str) -> None:
        self._round.pop(request_id, None)
        self.boost.reset(request_id)

    def preempt_key(self, req: Request) -> tuple[Any, ...]:
        """FCFS among requests holding KV, as MARS runs them."""
        return (req.queue_time, req.request_id)

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        rid, k = req.request_id, self.boost.done + 1
        if self.config.mars_boost_running and self.boost.is_boosted(rid, k):
            return (0, 0.0, req.queue_time, rid)
        status = req.status
        if status is RequestStatus.RUNNING:
            return (_RUNNING, 0.0, req.queue_time, rid)
        tier = WAITING
        if status is RequestStatus.WAITING and self.boost.is_boosted(rid, k):
            tier = BOOSTED
        return (tier, self.score(rid), req.queue_time, rid)

    def after_schedule(
        self, candidates: Sequence[Request], scheduled: set[str], now: float
    ) -> None:
        boost, k = self.boost, self.boost.done + 1
        waiting = RequestStatus.WAITING
        for r in candidates:
            rid = r.request_id
            if rid in scheduled:
                boost.leave(rid, k)
            elif r.status is waiting and r.first_scheduled_time is not None:
                boost.enter(rid, k)
        boost.done = k

    def make_queue(self) -> RankQueue:
        return MARSQueue(
            self._round, self.boost, self.chunk, self.params, self.config.mars_boost_running
        )
