"""The one scheduler that drives both the simulator and the engine (docs/design.md, the contract).

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
from augserve.core.prediction import (
    OnlineLearner,
    Prediction,
    Predictor,
    apply_prediction,
    client_key,
)
from augserve.core.request import CallRecord, FinishReason, Request, RequestStatus
from augserve.sched.budget import token_budget
from augserve.sched.call_handling import make_call_handling
from augserve.sched.kv_manager import KVCacheManager, swap_budget
from augserve.sched.output import (
    FinishedRequest,
    SchedulerOutput,
    SchedulerStats,
    SchedulerUpdate,
    StartedCall,
    StepEvent,
    StepResult,
)
from augserve.sched.packing import Packer
from augserve.sched.policies import make_policy, uses_dynamic_budget, uses_prefix_caching
from augserve.sched.prefix_cache import PrefixCache
from augserve.sched.progress import Protection, ThrashMeter
from augserve.sched.requests import LiveRequests
from augserve.sched.sessions import SessionTable


class Scheduler:
    """One scheduler for the simulator and the engine: arrivals, one iteration's
    decision, the executor's reports, call returns and aborts (the module doc).

    It owns its collaborators: `kv` (the `KVCacheManager`: blocks, prefix cache,
    swap, what paused requests hold), `requests` (`LiveRequests`: where each live
    request is), `policy` (the ranking policy), `calls` (the call-handling strategy
    the policy declared), `protection` and `thrash` (the progress rules) and
    `sessions` (paused client sessions, when `session_ttl > 0`).
    """

    def __init__(
        self, config: SchedulerConfig, latency: LatencyModel, predictor: Predictor | None = None
    ) -> None:
        self.config = config
        self.latency = latency
        self.predictor = predictor
        # a predictor that learns from the scheduler's reports (the server's default)
        self.learner = predictor if isinstance(predictor, OnlineLearner) else None
        self.kv = KVCacheManager.for_config(config, latency, uses_prefix_caching(config))
        self.policy = policy = make_policy(config, latency, self)
        self.calls = make_call_handling(
            policy.call_handling, policy, config, self.kv, latency,
            self.running_tokens, self.learner, self._refresh_prediction,
        )  # fmt: skip
        # progress rule 2 (`progress.py`): protection where the policy's preemption
        # order moves (a fixed order makes progress without it)
        self.protection = Protection(
            config.max_preemptions if policy.defaults.protection else None,
            policy.preempt_key,
            config.newest_first,
        )
        self.thrash = ThrashMeter(config.recompute_budget)
        self.dynamic_budget = uses_dynamic_budget(config)
        self.requests = LiveRequests(policy.make_queue() if config.incremental_ranking else None)
        self.sessions: SessionTable | None = None  # paused client sessions (`sessions.py`)
        if config.session_ttl > 0:
            self.sessions = SessionTable(config.session_ttl, self.kv, self.learner)
        self._update = SchedulerUpdate()
        self._running_tokens = 0
        self._running_batch = 0
        self._last_budget = config.max_batch_tokens
        self.iteration = 0
        self.capacity_tokens = config.num_device_blocks * config.block_size

    def latency_changed(self) -> None:
        """The latency model's numbers changed (the server's start-up fit switched it):
        refresh what was derived from them, the policy's decode iteration time and the
        swap budget when the config did not fix it."""
        self.policy.tau_iter = self.latency.decode_iter_time()
        self.kv.swap_budget_blocks = swap_budget(self.config, self.latency)

    # --- queries -------------------------------------------------------------------
    @property
    def pool(self) -> BlockPool:
        """The block pool, read-only for executors (the engine mirrors its moves)."""
        return self.kv.pool

    @property
    def prefix(self) -> PrefixCache | None:
        return self.kv.prefix

    @property
    def num_live(self) -> int:
        return len(self.requests)

    def has_runnable(self) -> bool:
        return bool(self.requests.runnable)

    def num_in_calls(self) -> int:
        return len(self.requests.paused)

    def is_paused(self, request_id: str) -> bool:
        return request_id in self.requests.paused

    def running_tokens(self) -> int:
        """Tokens held by running requests (L_other), as of the last `schedule()`."""
        return self._running_tokens

    def running_batch(self) -> int:
        """Tokens the running requests compute next (1 per decoding request, the rest of
        a prefill), as of the last `schedule()`: MARS's "running batch"."""
        return self._running_batch

    def token_budget(self) -> int:
        free, reclaimable = self.kv.pool.num_free_device, self.kv.reclaimable_blocks()
        return token_budget(self.config, self.dynamic_budget, free, reclaimable)

    def stats(self) -> SchedulerStats:
        return self.requests.stats(self.kv, self.sessions, self._last_budget)

    def live_requests(self) -> list[Request]:
        """Every request in the scheduler (for invariant checks and reports)."""
        return self.requests.all()

    # --- arrivals ------------------------------------------------------------------
    def add_request(
        self, req: Request, now: float, prediction: Prediction | None = None
    ) -> SchedulerUpdate:
        if req.request_id in self.requests:
            raise ValueError(f"request {req.request_id!r} is already in the scheduler")
        req.status = RequestStatus.WAITING
        req.last_scheduled_time = now
        if req.num_tokens + 1 > self.capacity_tokens:
            self._finish(req, FinishReason.ERROR, now)
            return self._take_update()
        if self.sessions is not None:
            self.sessions.continue_into(req, now, self._finish)
        apply_prediction(req, prediction, self.predictor)
        req.num_cached_tokens = self.kv.peek_computed_tokens(req)  # a cached prefix costs less
        self.policy.on_arrival(req, now)
        self.requests.add_runnable(req, now)
        return self._take_update()

    # --- one iteration ---------------------------------------------------------------
    def schedule(self, now: float) -> SchedulerOutput:
        self.iteration += 1
        out = SchedulerOutput(now=now)
        kv, requests = self.kv, self.requests
        kv.begin(out)
        self._running_tokens, self._running_batch = requests.count_running()
        if self.sessions is not None:
            self.sessions.expire(now, self._finish)  # the client never came back
        self.calls.each_iteration(now, self._running_tokens)
        if not self.config.lazy_eviction:
            kv.evict_all_reclaimable()
        out.token_budget = self._last_budget = self.token_budget()
        self.protection.engaged = self.thrash.engaged  # the progress rules, while thrashing
        if requests.queue is not None:
            requests.queue.advance(now)
        candidates = requests.candidates()
        packer = Packer(kv, self.policy, self.config, candidates, now,
                        queue=requests.queue, protection=self.protection)  # fmt: skip
        out.chunks = packer.run(out.token_budget)
        requests.scheduled(out.chunks, now)
        requests.requeue(packer.admitted, packer.preempted, now)
        scheduled = {c.request.request_id for c in out.chunks}
        self.policy.after_schedule(candidates, scheduled, now)
        kv.end()
        self.thrash.observe(kv.recomputed_tokens)
        return out

    # --- executor reports --------------------------------------------------------------
    def update_from_output(
        self, out: SchedulerOutput, results: Mapping[str, StepResult], now: float
    ) -> SchedulerUpdate:
        """Apply one iteration's results (`now`: when it ended)."""
        elapsed = max(0.0, now - out.now)
        get, capacity = results.get, self.capacity_tokens
        finish, call = StepEvent.FINISH, StepEvent.CALL
        kv, caching, bs = self.kv, self.kv.prefix is not None, self.config.block_size
        sessions = self.sessions
        for chunk in out.chunks:  # runs for every request of every iteration: kept lean
            req = chunk.request
            if req.finish_time is not None:
                continue  # aborted while the iteration ran
            req.num_computed_tokens += chunk.num_tokens
            req.exec_time += elapsed
            if caching and req.num_computed_tokens // bs > req.num_hashed_blocks:
                kv.cache_blocks(req)  # a block filled up: later requests may hit it
            if not chunk.sample:
                continue
            result = get(req.request_id, _NO_EVENT)
            req.append_generated(result.token_id, now)
            event = result.event
            if event is finish:
                tool_calls = result.finish_reason is FinishReason.TOOL_CALLS
                if tool_calls and sessions is not None and sessions.keeps(req, capacity):
                    self._start_call(req, result, now, client=True)
                else:
                    self._finish(req, result.finish_reason, now)
            elif req.num_tokens + 1 > capacity or req.generated_limit_reached():
                self._finish(req, FinishReason.LENGTH, now)
            elif event is call:
                self._start_call(req, result, now)
        return self._take_update()

    def _start_call(
        self, req: Request, result: StepResult, now: float, client: bool = False
    ) -> None:
        """A call starts: a server tool's (`calls_started`), or, with `client`, a
        client's: the request ended with "tool_calls" and is kept as a session."""
        if self.learner is not None:
            self.learner.observe_segment(req, True)
        Protection.segment_done(req)
        self.thrash.segment_ended(req)
        self.requests.pause(req)
        tool = client_key(result.tool) if client else result.tool
        req.calls.append(CallRecord(start=now, tool=tool, args_len=result.args_len))
        policy = self.calls.at_call(req, result.tool, now, soft=client)
        if req.status is RequestStatus.PAUSED_DISCARDED:  # freed at once (vLLM)
            self._update.kv_discarded.append(req.request_id)
        if client:
            assert self.sessions is not None
            self.sessions.add(req)
            self._update.sessions_paused.append(req)
        else:
            self._update.calls_started.append(StartedCall(req, policy))
        self.policy.on_call(req, now)

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
        requests = self.requests
        req = requests.take_returned(request_id, num_returned, token_ids)
        if req is None:
            return self._take_update()  # aborted during its call: the result is dropped
        self.kv.release(req)
        self.calls.forget(request_id)
        req.end_call(num_returned, token_ids, now)
        if self.learner is not None:
            self.learner.observe_call(req)
        applied = req.leave_call(now)
        self.calls.at_return(req, now)
        if req.num_tokens + 1 > self.capacity_tokens:
            self._finish(req, FinishReason.LENGTH, now)
            return self._take_update()
        apply_prediction(req, prediction, self.predictor)
        req.num_cached_tokens = self.kv.peek_computed_tokens(req)  # a cached prefix costs less
        self.policy.on_return(req, applied, now)
        requests.add_runnable(req, now)
        return self._take_update()

    def abort(
        self, request_id: str, now: float, reason: FinishReason = FinishReason.ABORT
    ) -> SchedulerUpdate:
        """Finish a live request as aborted (an unknown id changes nothing); `reason`
        ERROR: the executor failed on it (a forward that raised)."""
        req = self.requests.get(request_id)
        if req is not None:
            if req.in_call and not (self.sessions is not None and request_id in self.sessions):
                req.calls[-1].end = now
                self.requests.aborted_in_call.add(request_id)
            self._finish(req, reason, now)
        return self._take_update()

    # --- bookkeeping shared by the transitions -------------------------------------
    def _refresh_prediction(self, req: Request, tool: str | None) -> None:
        """At a call (the strategies that keep the KV ask): the call is known now, so
        a fresh prediction is a better guess (a tool's, or a learner's)."""
        if self.predictor is not None and (tool is not None or self.learner):
            apply_prediction(req, None, self.predictor)

    def _finish(self, req: Request, reason: FinishReason, now: float) -> None:
        if self.learner is not None and reason in _SEGMENT_ENDS and not req.in_call:
            self.learner.observe_segment(req, reason is FinishReason.TOOL_CALLS)
        if not req.in_call:  # one in a call ended its segment when the call started
            self.thrash.segment_ended(req)
        self.kv.free(req)
        self.requests.remove(req)
        if self.sessions is not None:
            self.sessions.remove(req.request_id)
        self.calls.forget(req.request_id)
        req.status = reason.status
        req.finish_reason = reason
        req.finish_time = now
        self.policy.forget(req.request_id)
        self._update.finished.append(FinishedRequest(req, reason))

    def _take_update(self) -> SchedulerUpdate:
        upd, self._update = self._update, SchedulerUpdate()
        return upd


# finishes that end a segment as the model chose (a cap or an abort cuts it short)
_SEGMENT_ENDS = (FinishReason.STOP, FinishReason.TOOL_CALLS)
_NO_EVENT = StepResult()  # what a sampling chunk without a result reports
