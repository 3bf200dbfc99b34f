"""The one scheduler that drives both the simulator and the engine (DESIGN.md contract).

    upd = sched.add_request(req, now)                  # arrival
    out = sched.schedule(now)                          # one iteration's decision
    upd = sched.update_from_output(out, results, now)  # what happened: finished, calls
                                                       # started, KV freed
    upd = sched.resume(req_id, num_returned, now)      # the external call came back
    upd = sched.abort(req_id, now)                     # client went away / error

Every mutating call returns a `SchedulerUpdate` saying what changed; executors
act on it and on `SchedulerOutput`, and never read the queues. Time is always
passed in; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from augserve.core.block_pool import BlockPool
from augserve.core.config import SchedulerConfig
from augserve.core.latency import LatencyModel
from augserve.core.prediction import Prediction, Predictor
from augserve.core.request import (
    CallRecord,
    ContextPolicy,
    FinishReason,
    Request,
    RequestStatus,
)
from augserve.sched.budget import dynamic_token_budget
from augserve.sched.context_policy import choose_context_policy
from augserve.sched.kv_manager import KVManager
from augserve.sched.memory import MemoryManager
from augserve.sched.output import (
    FinishedRequest,
    SchedulerOutput,
    SchedulerStats,
    SchedulerUpdate,
    StartedCall,
    StepEvent,
    StepResult,
)
from augserve.sched.packing import Packer, pack_batch
from augserve.sched.policies import make_policy, uses_dynamic_budget
from augserve.sched.ranking import RankQueue
from augserve.sched.replan import Replanner


class Scheduler:
    def __init__(
        self, config: SchedulerConfig, latency: LatencyModel, predictor: Predictor | None = None
    ) -> None:
        self.config = config
        self.latency = latency
        self.predictor = predictor
        self.pool = BlockPool(config.num_device_blocks, config.num_host_blocks, config.block_size)
        swap_budget = config.swap_budget_blocks or max(
            1, latency.swap_tokens_per_iter() // config.block_size
        )
        self.memory = MemoryManager(KVManager(self.pool, swap_budget))
        self.policy = make_policy(config, latency, self)
        self.dynamic_budget = uses_dynamic_budget(config)
        self._runnable: dict[str, Request] = {}  # WAITING, RUNNING, RESUMABLE_SWAPPED
        # incremental ranking: runnable requests holding KV here, the others in the queue
        self.queue: RankQueue | None = None
        if config.incremental_ranking:
            self.queue = self.policy.make_queue()
        self._held: dict[str, Request] = {}
        self._paused: dict[str, Request] = {}  # in an external call
        self._aborted_in_call: set[str] = set()
        self._update = SchedulerUpdate()
        self._running_tokens = 0
        self._running_batch = 0
        self._replanner: Replanner | None = None  # INFERCEPT's per-iteration re-choice
        if (
            config.reevaluate_paused
            and not self.policy.discard_on_call
            and config.forced_context_policy is None
        ):
            self._replanner = Replanner(self.memory, latency, config.block_size)
        self._last_budget = config.max_batch_tokens
        self.iteration = 0
        self.capacity_tokens = config.num_device_blocks * config.block_size

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
        for r in (*self._runnable.values(), *self._paused.values()):
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
        )

    def live_requests(self) -> list[Request]:
        """Every request in the scheduler (for invariant checks and reports)."""
        return [*self._runnable.values(), *self._paused.values()]

    # --- arrivals ------------------------------------------------------------------
    def add_request(
        self, req: Request, now: float, prediction: Prediction | None = None
    ) -> SchedulerUpdate:
        if req.request_id in self._runnable or req.request_id in self._paused:
            raise ValueError(f"request {req.request_id!r} is already in the scheduler")
        req.status = RequestStatus.WAITING
        req.last_scheduled_time = now
        if req.num_tokens + 1 > self.capacity_tokens:
            self._finish(req, FinishReason.ERROR, now)
            return self._take_update()
        self._apply_prediction(req, prediction)
        self.policy.on_arrival(req, now)
        self._add_runnable(req, now)
        return self._take_update()

    def _add_runnable(self, req: Request, now: float) -> None:
        self._runnable[req.request_id] = req
        if self.queue is None:
            return
        if req.block_ids or req.host_block_ids:
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

    # --- one iteration ---------------------------------------------------------------
    def schedule(self, now: float) -> SchedulerOutput:
        self.iteration += 1
        out = SchedulerOutput(now=now)
        self.memory.kv.begin(out)
        self._count_running()
        if self._replanner is not None:
            self._replanner.run(now, self._running_tokens)
        if not self.config.lazy_eviction:
            self.memory.evict_all_reclaimable()
        out.token_budget = self._last_budget = self.token_budget()
        queue = self.queue
        if queue is None:
            candidates = list(self._runnable.values())
            out.chunks = pack_batch(
                self.memory, self.policy, self.config, candidates, out.token_budget, now
            )
        else:
            queue.advance(now)
            candidates = list(self._held.values())
            packer = Packer(self.memory, self.policy, self.config, candidates, now, queue=queue)
            out.chunks = packer.run(out.token_budget)
        running = RequestStatus.RUNNING
        for chunk in out.chunks:
            req = chunk.request
            req.status = running
            req.last_scheduled_time = now
            if req.first_scheduled_time is None:
                req.first_scheduled_time = now
        if queue is not None:
            self._requeue(packer, queue, now)
        if self.policy.needs_after_schedule:
            scheduled = {c.request.request_id for c in out.chunks}
            self.policy.after_schedule(candidates, scheduled, now)
        self.memory.kv.end()
        return out

    def _requeue(self, packer: Packer, queue: RankQueue, now: float) -> None:
        """Move requests that got KV out of the queue, and those that lost it in."""
        held = self._held
        for req in packer.admitted:
            queue.remove(req)
            held[req.request_id] = req
        for req in packer.preempted:
            if not (req.block_ids or req.host_block_ids):
                del held[req.request_id]
                queue.add(req, now)

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

    # --- executor reports --------------------------------------------------------------
    def update_from_output(
        self, out: SchedulerOutput, results: Mapping[str, StepResult], now: float
    ) -> SchedulerUpdate:
        """Apply one iteration's results (`now`: when it ended)."""
        elapsed = max(0.0, now - out.now)
        get = results.get
        for chunk in out.chunks:
            req = chunk.request
            if req.finish_time is not None:
                continue  # aborted while the iteration ran
            req.num_computed_tokens += chunk.num_tokens
            req.exec_time += elapsed
            if chunk.sample:
                self._apply_sample(req, get(req.request_id, _NO_EVENT), now)
        return self._take_update()

    def _apply_sample(self, req: Request, result: StepResult, now: float) -> None:
        req.append_generated(result.token_id, now)
        if result.event is StepEvent.FINISH:
            self._finish(req, result.finish_reason, now)
        elif req.generated_limit_reached() or req.num_tokens + 1 > self.capacity_tokens:
            self._finish(req, FinishReason.LENGTH, now)
        elif result.event is StepEvent.CALL:
            self._start_call(req, result, now)

    def _start_call(self, req: Request, result: StepResult, now: float) -> None:
        self._drop_runnable(req)
        self._paused[req.request_id] = req
        req.calls.append(CallRecord(start=now, tool=result.tool, args_len=result.args_len))
        if self.policy.discard_on_call:
            policy = ContextPolicy.DISCARD
        else:
            if result.tool is not None and self.predictor is not None:
                self._apply_prediction(req, None)  # the tool is known now: a better guess
            policy = self._choose_policy(req)
        self.memory.pause(req, policy, discard_now=self.policy.discard_on_call)
        if self.policy.discard_on_call:
            self._update.kv_discarded.append(req.request_id)
        self._update.calls_started.append(StartedCall(req, policy))
        self.policy.on_call(req, now)

    def _choose_policy(self, req: Request) -> ContextPolicy:
        if self.config.forced_context_policy is not None:
            return self.config.forced_context_policy
        return choose_context_policy(
            req.num_tokens,
            req.pred_call_time or 0.0,
            self.running_tokens(),
            self.latency,
            allow_swap=self.pool.num_host_blocks > 0,
        )

    def resume(
        self,
        request_id: str,
        num_returned: int,
        now: float,
        token_ids: Sequence[int] | None = None,
        prediction: Prediction | None = None,
    ) -> SchedulerUpdate:
        """The call came back with `num_returned` tokens (`token_ids`, where the executor
        keeps real tokens). `prediction`, if given, was made off the engine loop for the
        state after the return (see `Request.preview_return`)."""
        req = self._paused.pop(request_id, None)
        if req is None:
            if request_id in self._aborted_in_call:
                self._aborted_in_call.discard(request_id)
                return self._take_update()  # aborted during its call: the result is dropped
            raise KeyError(f"request {request_id!r} is not paused in a call")
        if token_ids is not None and len(token_ids) != num_returned:
            raise ValueError(f"resume {request_id!r}: {len(token_ids)} ids for {num_returned}")
        self.memory.release(req)
        self._forget_plan(request_id)
        call = req.calls[-1]
        call.end = now
        call.returned_tokens = req.append_returned(num_returned, token_ids)
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
            return self._take_update()
        self._apply_prediction(req, prediction)
        self.policy.on_return(req, applied, now)
        self._add_runnable(req, now)
        self._update.resumed.append(request_id)
        return self._take_update()

    def abort(self, request_id: str, now: float) -> SchedulerUpdate:
        """Finish a live request as aborted (an unknown id changes nothing)."""
        req = self._runnable.get(request_id) or self._paused.get(request_id)
        if req is not None:
            if req.in_call:
                req.calls[-1].end = now
                self._aborted_in_call.add(request_id)
            self._finish(req, FinishReason.ABORT, now)
        return self._take_update()

    def _finish(self, req: Request, reason: FinishReason, now: float) -> None:
        self.memory.free(req)
        self._drop_runnable(req)
        self._paused.pop(req.request_id, None)
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


_NO_EVENT = StepResult()  # what a sampling chunk without a result reports

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
