"""The scheduler's state, its queries and the bookkeeping its transitions share.

`SchedulerState` holds everything the `Scheduler` (`scheduler.py`) decides on:
the block pool and the `MemoryManager`, the ranking policy, the runnable
requests (WAITING, RUNNING, RESUMABLE_SWAPPED; with incremental ranking split
into those holding KV, ranked afresh each iteration, and the policy's
persistent queue of the others), the paused requests (in an external call) and
INFERCEPT's replanner. It answers the queries executors and faces may ask
(`num_live`, `stats()`, `token_budget()`, ...) and keeps the bookkeeping every
transition shares: entering and leaving the runnable set, applying a
prediction, finishing a request, handing out the pending `SchedulerUpdate`.
The transitions themselves (the contract of docs/design.md) are `Scheduler`'s.
"""

from __future__ import annotations

from augserve.core.block_pool import BlockPool
from augserve.core.config import SchedulerConfig
from augserve.core.latency import LatencyModel
from augserve.core.prediction import OnlineLearner, Prediction, Predictor
from augserve.core.request import FinishReason, Request, RequestStatus
from augserve.sched.budget import dynamic_token_budget
from augserve.sched.kv_manager import KVManager
from augserve.sched.memory import MemoryManager
from augserve.sched.output import FinishedRequest, SchedulerStats, SchedulerUpdate
from augserve.sched.policies import make_policy, uses_dynamic_budget, uses_prefix_caching
from augserve.sched.progress import Protection, ThrashMeter
from augserve.sched.ranking import RankQueue
from augserve.sched.replan import Replanner
from augserve.sched.sessions import SessionTable


class SchedulerState:
    """The state `Scheduler` works on (see the module doc); never used on its own."""

    def __init__(
        self, config: SchedulerConfig, latency: LatencyModel, predictor: Predictor | None = None
    ) -> None:
        self.config = config
        self.latency = latency
        self.predictor = predictor
        # a predictor that learns from the scheduler's reports (the server's default)
        self.learner = predictor if isinstance(predictor, OnlineLearner) else None
        self.pool = BlockPool(config.num_device_blocks, config.num_host_blocks, config.block_size)
        swap_budget = config.swap_budget_blocks or max(
            1, latency.swap_tokens_per_iter() // config.block_size
        )
        kv = KVManager(self.pool, swap_budget, uses_prefix_caching(config))
        self.memory = MemoryManager(kv)
        self.prefix = kv.prefix
        self.policy = make_policy(config, latency, self)
        # progress rule 2 (`progress.py`): protection where the policy's preemption
        # order moves (a fixed order makes progress without it)
        policy = self.policy
        self.protection = Protection(
            None if policy.fixed_preempt_order else config.max_preemptions, policy.preempt_key
        )
        self.thrash = ThrashMeter(config.recompute_budget)
        self.dynamic_budget = uses_dynamic_budget(config)
        self._runnable: dict[str, Request] = {}  # WAITING, RUNNING, RESUMABLE_SWAPPED
        # incremental ranking: runnable requests holding KV here, the others in the queue
        self.queue: RankQueue | None = None
        if config.incremental_ranking:
            self.queue = self.policy.make_queue()
        self._held: dict[str, Request] = {}
        self._paused: dict[str, Request] = {}  # in an external call
        self._aborted_in_call: set[str] = set()
        # paused client sessions ("tool_calls" kept, `sessions.py`), when session_ttl > 0
        self.sessions = SessionTable(config.session_ttl) if config.session_ttl > 0 else None
        self._update = SchedulerUpdate()
        self._running_tokens = 0
        self._running_batch = 0
        self._replanner: Replanner | None = None  # INFERCEPT's per-iteration re-choice
        if (
            config.reevaluate_paused
            and not self.policy.discard_on_call
            and not self.policy.owns_context_policy
            and config.forced_context_policy is None
        ):
            self._replanner = Replanner(self.memory, latency, config.block_size, self.learner)
        self._last_budget = config.max_batch_tokens
        self.iteration = 0
        self.capacity_tokens = config.num_device_blocks * config.block_size

    def latency_changed(self) -> None:
        """The latency model's numbers changed (the server's start-up fit switched it):
        refresh what was derived from them, the policy's decode iteration time and the
        swap budget when the config did not fix it."""
        self.policy.tau_iter = self.latency.decode_iter_time()
        if self.config.swap_budget_blocks is None:
            per_iter = self.latency.swap_tokens_per_iter() // self.config.block_size
            self.memory.kv.swap_budget_blocks = max(1, per_iter)

    # --- queries -------------------------------------------------------------------
    @property
    def num_live(self) -> int:
        return len(self._runnable) + len(self._paused)

    @property
    def num_held(self) -> int:
        """Runnable requests holding KV (with incremental ranking; 0 without)."""
        return len(self._held)

    def has_runnable(self) -> bool:
        return bool(self._runnable)

    def num_in_calls(self) -> int:
        return len(self._paused)

    def is_paused(self, request_id: str) -> bool:
        return request_id in self._paused

    def running_tokens(self) -> int:
        """Tokens held by running requests (L_other), as of the last `schedule()`."""
        return self._running_tokens

    def running_batch(self) -> int:
        """Tokens the running requests compute next (1 per decoding request, the rest of
        a prefill), as of the last `schedule()`: MARS's "running batch"."""
        return self._running_batch

    def token_budget(self) -> int:
        cfg = self.config
        if not self.dynamic_budget:
            return cfg.max_batch_tokens
        return dynamic_token_budget(
            self.pool.num_free_device,
            self.memory.reclaimable_blocks(),
            cfg.block_size,
            cfg.max_batch_tokens,
            cfg.beta_low,
            cfg.beta_high,
        )

    def stats(self) -> SchedulerStats:
        counts = {s: 0 for s in RequestStatus}
        swapped = 0
        sessions = self.sessions.requests if self.sessions is not None else {}
        for r in (*self._runnable.values(), *self._paused.values()):
            if r.request_id not in sessions:  # client sessions are counted apart
                counts[r.status] += 1
            swapped += bool(r.host_block_ids)
        pool = self.pool
        return SchedulerStats(
            num_waiting=counts[RequestStatus.WAITING],
            num_running=counts[RequestStatus.RUNNING] + counts[RequestStatus.RESUMABLE_SWAPPED],
            num_paused={
                "preserve": counts[RequestStatus.PAUSED_PRESERVED],
                "swap": counts[RequestStatus.PAUSED_SWAPPED],
                "discard": counts[RequestStatus.PAUSED_DISCARDED],
            },
            num_swapped=swapped,
            device_blocks_used=pool.num_device_blocks - pool.num_free_device,
            device_blocks_total=pool.num_device_blocks,
            host_blocks_used=pool.num_host_blocks - pool.num_free_host,
            host_blocks_total=pool.num_host_blocks,
            token_budget=self._last_budget,
            device_blocks_cached=pool.device.num_cached_free,
            prefix_cache_queries=self.prefix.stats.queries if self.prefix else 0,
            prefix_cache_hits=self.prefix.stats.hits if self.prefix else 0,
            num_sessions=len(sessions),
            preemptions=dict(self.memory.preemptions),
            recomputed_tokens=self.memory.recomputed_tokens,
        )

    def live_requests(self) -> list[Request]:
        """Every request in the scheduler (for invariant checks and reports)."""
        return [*self._runnable.values(), *self._paused.values()]

    # --- bookkeeping shared by the transitions -------------------------------------
    def _add_runnable(self, req: Request, now: float) -> None:
        self._runnable[req.request_id] = req
        if self.queue is None:
            return
        if req.block_ids or req.host_block_ids or req.protected is not None:
            self._held[req.request_id] = req
        else:
            self.queue.add(req, now)

    def _drop_runnable(self, req: Request) -> None:
        if (
            self._runnable.pop(req.request_id, None) is not None
            and self.queue is not None
            and self._held.pop(req.request_id, None) is None
        ):
            self.queue.remove(req)

    def _apply_prediction(self, req: Request, prediction: Prediction | None) -> None:
        if prediction is None and self.predictor is not None:
            prediction = self.predictor.predict([req])[0]
        if prediction is None:
            prediction = Prediction(output_len=1.0, call_time=None)
        req.pred_output_len = prediction.output_len
        req.pred_call_time = prediction.call_time
        req.pred_return_len = prediction.return_len

    def _peek_prefix(self, req: Request) -> None:
        """What of a request without KV the prefix cache holds now, for the policy's
        costs (a request whose prefix is cached costs less to admit)."""
        if self.prefix is not None and not (req.block_ids or req.host_block_ids):
            req.num_cached_tokens = self.prefix.peek_tokens(req)
        else:
            req.num_cached_tokens = 0

    def _count_running(self) -> None:
        """L_other (tokens held by running requests) and MARS's running batch."""
        tokens = batch = 0
        running = RequestStatus.RUNNING
        reqs = self._runnable if self.queue is None else self._held  # RUNNING holds KV
        for r in reqs.values():
            if r.status is running:
                tokens += r.num_computed_tokens
                batch += r.num_tokens - r.num_computed_tokens
        self._running_tokens, self._running_batch = tokens, batch

    def _forget_plan(self, request_id: str) -> None:
        if self._replanner is not None:
            self._replanner.forget(request_id)

    def _finish(self, req: Request, reason: FinishReason, now: float) -> None:
        if self.learner is not None and reason in _SEGMENT_ENDS and not req.in_call:
            self.learner.observe_segment(req, reason is FinishReason.TOOL_CALLS)
        self.thrash.segment_ended(req)
        self.memory.free(req)
        self._drop_runnable(req)
        self._paused.pop(req.request_id, None)
        if self.sessions is not None:
            self.sessions.remove(req.request_id)
        self._forget_plan(req.request_id)
        req.status = reason.status
        req.finish_reason = reason
        req.finish_time = now
        self.policy.forget(req.request_id)
        self._update.finished.append(FinishedRequest(req, reason))
        self._update.kv_freed.append(req.request_id)

    def _take_update(self) -> SchedulerUpdate:
        upd, self._update = self._update, SchedulerUpdate()
        return upd


# finishes that end a segment as the model chose (a cap or an abort cuts it short)
_SEGMENT_ENDS = (FinishReason.STOP, FinishReason.TOOL_CALLS)
