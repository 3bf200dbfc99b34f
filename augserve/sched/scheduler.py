"""The one scheduler that drives both the simulator and the engine (DESIGN.md contract).

    sched.add_request(req, now)                  # arrival
    out = sched.schedule(now)                    # one iteration's decision
    sched.update_from_output(out, results, now)  # tokens produced, segment ends
    sched.resume(req_id, returned_tokens, now)   # the external call came back
    sched.abort(req_id, now)                     # client went away / error

Time is always passed in; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from augserve.core.block_pool import BlockPool
from augserve.core.config import SchedulerConfig
from augserve.core.cost import CostModel
from augserve.core.prediction import Prediction, Predictor
from augserve.core.request import (
    CallRecord,
    ContextPolicy,
    FinishReason,
    Request,
    RequestStatus,
)
from augserve.sched.budget import dynamic_budget
from augserve.sched.costs import choose_context_policy
from augserve.sched.kv_manager import KVManager
from augserve.sched.output import ScheduledChunk, SchedulerOutput, StepEvent, StepResult
from augserve.sched.packing import pack_batch
from augserve.sched.policies import make_policy

_EVICTABLE = (ContextPolicy.SWAP, ContextPolicy.DISCARD)


class Scheduler:
    def __init__(
        self, config: SchedulerConfig, cost: CostModel, predictor: Predictor | None = None
    ) -> None:
        self.config = config
        self.cost = cost
        self.predictor = predictor
        self.pool = BlockPool(config.num_device_blocks, config.num_host_blocks, config.block_size)
        swap_budget = config.swap_budget_blocks or max(
            1, cost.swap_tokens_per_iter() // config.block_size
        )
        self.kv = KVManager(self.pool, swap_budget)
        self.policy = make_policy(config, cost)
        self.runnable: dict[str, Request] = {}  # WAITING, RUNNING, RESUMABLE_SWAPPED
        self.paused: dict[str, Request] = {}  # in an external call
        self.reclaimable: dict[str, Request] = {}  # paused, Swap/Discard, KV still on device
        self.finished: list[Request] = []
        self._aborted_in_call: set[str] = set()
        self._running_tokens = 0
        self.iteration = 0
        self.capacity_tokens = config.num_device_blocks * config.block_size

    # --- queries -------------------------------------------------------------------
    @property
    def num_live(self) -> int:
        return len(self.runnable) + len(self.paused)

    def has_runnable(self) -> bool:
        return bool(self.runnable)

    def get(self, request_id: str) -> Request | None:
        return self.runnable.get(request_id) or self.paused.get(request_id)

    def running_tokens(self) -> int:
        """Tokens held by running requests (L_other), as of the last `schedule()`."""
        return self._running_tokens

    def _count_running_tokens(self) -> int:
        running = RequestStatus.RUNNING
        return sum(r.num_computed_tokens for r in self.runnable.values() if r.status is running)

    def reclaimable_blocks(self) -> int:
        return sum(len(r.block_ids) for r in self.reclaimable.values())

    def token_budget(self) -> int:
        cfg = self.config
        if not cfg.uses_dynamic_budget:
            return cfg.max_batch_tokens
        return dynamic_budget(
            self.pool.num_free_device,
            self.reclaimable_blocks(),
            cfg.block_size,
            cfg.max_batch_tokens,
            cfg.beta_low,
            cfg.beta_high,
        )

    # --- arrivals ------------------------------------------------------------------
    def add_request(self, req: Request, now: float, prediction: Prediction | None = None) -> None:
        if req.request_id in self.runnable or req.request_id in self.paused:
            raise ValueError(f"request {req.request_id!r} is already in the scheduler")
        req.status = RequestStatus.WAITING
        req.last_scheduled_time = now
        if req.num_tokens + 1 > self.capacity_tokens:
            self._finish(req, FinishReason.ERROR, now)
            return
        self._apply_prediction(req, prediction)
        self.policy.running_tokens = self.running_tokens()
        self.policy.on_arrival(req, now)
        self.runnable[req.request_id] = req

    def _apply_prediction(self, req: Request, prediction: Prediction | None) -> None:
        if prediction is None and self.predictor is not None:
            prediction = self.predictor.predict([req])[0]
        if prediction is None:
            prediction = Prediction(output_len=1.0, call_time=None)
        req.pred_output_len = prediction.output_len
        req.pred_call_time = prediction.call_time
        req.pred_return_len = prediction.return_len

    # --- one iteration ---------------------------------------------------------------
    def schedule(self, now: float) -> SchedulerOutput:
        self.iteration += 1
        out = SchedulerOutput(now=now)
        self.kv.begin(out)
        if not self.config.lazy_eviction:
            self._evict_eagerly()
        out.token_budget = self.token_budget()
        self._running_tokens = self._count_running_tokens()
        candidates = list(self.runnable.values())
        out.chunks = pack_batch(self, candidates, out.token_budget, now)
        for req in candidates:
            req.num_skipped += 1
        running = RequestStatus.RUNNING
        for chunk in out.chunks:
            req = chunk.request
            req.status = running
            req.last_scheduled_time = now
            req.num_skipped = 0
            if req.first_scheduled_time is None:
                req.first_scheduled_time = now
        scheduled = {c.request.request_id for c in out.chunks}
        self.policy.after_schedule(candidates, scheduled, now)
        return out

    def _evict_eagerly(self) -> None:
        for req in list(self.reclaimable.values()):
            self.evict(req, len(req.block_ids), urgent=False)

    # --- memory (used by the packer) -----------------------------------------------
    def evict(self, req: Request, blocks: int, urgent: bool) -> int:
        """Free device blocks of a paused request by its policy. Returns blocks freed.

        Swap moves blocks from the back within the swap budget; with no host
        space it falls back to discard. When `urgent` (a running request cannot
        grow), a swap that the budget blocks becomes a discard.
        """
        wants_swap = req.context_policy is not ContextPolicy.DISCARD and self.pool.num_host_blocks
        if wants_swap and self.kv.can_swap_out():
            freed = self.kv.swap_out(req, blocks)
            req.status = RequestStatus.PAUSED_SWAPPED
            if not req.block_ids:
                self.reclaimable.pop(req.request_id, None)
            return freed
        if wants_swap and not urgent and self.pool.num_free_host > 0:
            return 0  # swap budget spent for this iteration: try again next one
        freed = self.kv.discard(req)
        req.status = RequestStatus.PAUSED_DISCARDED
        self.reclaimable.pop(req.request_id, None)
        return freed

    def preempt(self, req: Request) -> None:
        """Take a runnable request's KV away (vLLM recompute preemption)."""
        self.kv.discard(req)
        req.status = RequestStatus.WAITING

    # --- executor reports --------------------------------------------------------------
    def update_from_output(
        self, out: SchedulerOutput, results: Mapping[str, StepResult], now: float
    ) -> None:
        elapsed = max(0.0, now - out.now)
        for chunk in out.chunks:
            req = chunk.request
            if req.finish_time is not None:
                continue  # aborted while the iteration ran
            req.num_computed_tokens += chunk.num_tokens
            req.exec_time += elapsed
            if chunk.sample:
                self._apply_sample(req, results.get(req.request_id, StepResult()), now)

    def _apply_sample(self, req: Request, result: StepResult, now: float) -> None:
        req.append_generated(result.token_id, now)
        if result.event is StepEvent.FINISH:
            self._finish(req, result.finish_reason, now)
        elif req.generated_limit_reached() or req.num_tokens + 1 > self.capacity_tokens:
            self._finish(req, FinishReason.LENGTH, now)
        elif result.event is StepEvent.CALL:
            self._start_call(req, now)

    def _start_call(self, req: Request, now: float) -> None:
        del self.runnable[req.request_id]
        self.paused[req.request_id] = req
        req.calls.append(CallRecord(start=now))
        req.status = RequestStatus.PAUSED_PRESERVED
        if self.policy.discard_on_call:
            req.context_policy = ContextPolicy.DISCARD
            self.kv.discard(req)
            req.status = RequestStatus.PAUSED_DISCARDED
        else:
            req.context_policy = self._choose_policy(req)
            if req.context_policy in _EVICTABLE:
                self.reclaimable[req.request_id] = req
        self.policy.on_call(req, now)

    def _choose_policy(self, req: Request) -> ContextPolicy:
        if self.config.forced_context_policy is not None:
            return self.config.forced_context_policy
        return choose_context_policy(
            req.num_tokens,
            req.pred_call_time or 0.0,
            self.running_tokens(),
            self.cost,
            allow_swap=self.pool.num_host_blocks > 0,
        )

    def resume(
        self,
        request_id: str,
        returned_tokens: list[int] | int,
        now: float,
        prediction: Prediction | None = None,
    ) -> None:
        """The call came back. `prediction`, if given, was made off the engine loop
        for the state after the return (see `Request.preview_return`)."""
        req = self.paused.pop(request_id, None)
        if req is None:
            if request_id in self._aborted_in_call:
                self._aborted_in_call.discard(request_id)
                return  # aborted during its call: the late result is dropped
            raise KeyError(f"request {request_id!r} is not paused in a call")
        self.reclaimable.pop(request_id, None)
        call = req.calls[-1]
        call.end = now
        call.returned_tokens = req.append_returned(returned_tokens)
        applied = _APPLIED[req.status]
        call.policy = applied
        req.status = _RESUMED[req.status]
        req.segment_index += 1
        req.segment_generated = 0
        req.last_scheduled_time = now
        if self.policy.requeue_on_return:
            req.queue_time = now
        if req.num_tokens + 1 > self.capacity_tokens:
            self._finish(req, FinishReason.LENGTH, now)
            return
        self._apply_prediction(req, prediction)
        self.policy.running_tokens = self.running_tokens()
        self.policy.on_return(req, applied, now)
        self.runnable[request_id] = req

    def abort(self, request_id: str, now: float) -> bool:
        req = self.get(request_id)
        if req is None:
            return False
        if req.in_call:
            req.calls[-1].end = now
            self._aborted_in_call.add(request_id)
        self._finish(req, FinishReason.ABORT, now)
        return True

    def _finish(self, req: Request, reason: FinishReason, now: float) -> None:
        self.kv.free_all(req)
        self.runnable.pop(req.request_id, None)
        self.paused.pop(req.request_id, None)
        self.reclaimable.pop(req.request_id, None)
        req.status = reason.status
        req.finish_reason = reason
        req.finish_time = now
        forget = getattr(self.policy, "forget", None)
        if forget is not None:
            forget(req.request_id)
        self.finished.append(req)

    def make_chunk(self, req: Request, num_tokens: int) -> ScheduledChunk:
        start = req.num_computed_tokens
        return ScheduledChunk(req, num_tokens, start, start + num_tokens == req.num_tokens)


_APPLIED = {
    RequestStatus.PAUSED_PRESERVED: ContextPolicy.PRESERVE,
    RequestStatus.PAUSED_SWAPPED: ContextPolicy.SWAP,
    RequestStatus.PAUSED_DISCARDED: ContextPolicy.DISCARD,
}
_RESUMED = {
    RequestStatus.PAUSED_PRESERVED: RequestStatus.RUNNING,
    RequestStatus.PAUSED_SWAPPED: RequestStatus.RESUMABLE_SWAPPED,
    RequestStatus.PAUSED_DISCARDED: RequestStatus.WAITING,
}
