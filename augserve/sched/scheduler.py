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

from augserve.core.prediction import Prediction, client_key
from augserve.core.request import CallRecord, ContextPolicy, FinishReason, Request, RequestStatus
from augserve.sched.context_policy import choose_context_policy
from augserve.sched.output import (
    SchedulerOutput,
    SchedulerUpdate,
    StartedCall,
    StepEvent,
    StepResult,
)
from augserve.sched.packing import Packer, pack_batch
from augserve.sched.progress import Protection
from augserve.sched.ranking import RankQueue
from augserve.sched.sessions import extends, take_over_kv
from augserve.sched.state import SchedulerState


class Scheduler(SchedulerState):
    """One scheduler for the simulator and the engine: arrivals, one iteration's
    decision, the executor's reports, call returns and aborts (the module doc)."""

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
        if self.sessions is not None:
            old = self.sessions.match(req.session_id, req.token_ids, req.cache_salt)
            if old is not None:
                self._continue_session(old, req, now)
        self._apply_prediction(req, prediction)
        self._peek_prefix(req)
        self.policy.on_arrival(req, now)
        self._add_runnable(req, now)
        return self._take_update()

    # --- one iteration ---------------------------------------------------------------
    def schedule(self, now: float) -> SchedulerOutput:
        self.iteration += 1
        out = SchedulerOutput(now=now)
        self.memory.kv.begin(out)
        self._count_running()
        if self.sessions is not None:
            for req in self.sessions.expired(now):
                self._finish(req, FinishReason.ABORT, now)  # the client never came back
        if self._replanner is not None:
            self._replanner.run(now, self._running_tokens)
        elif self.policy.owns_context_policy:
            for req in self.policy.replan(self.memory.in_call, now):
                self.memory.replan(req, ContextPolicy.DISCARD)
        if not self.config.lazy_eviction:
            self.memory.evict_all_reclaimable()
        out.token_budget = self._last_budget = self.token_budget()
        self.protection.engaged = self.thrash.engaged  # the progress rules, while thrashing
        queue = self.queue
        if queue is None:
            candidates = list(self._runnable.values())
            out.chunks = pack_batch(
                self.memory,
                self.policy,
                self.config,
                candidates,
                out.token_budget,
                now,
                self.protection,
            )
        else:
            queue.advance(now)
            candidates = list(self._held.values())
            packer = Packer(
                self.memory,
                self.policy,
                self.config,
                candidates,
                now,
                queue=queue,
                protection=self.protection,
            )
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
        self.thrash.observe(self.memory.recomputed_tokens)
        return out

    def _requeue(self, packer: Packer, queue: RankQueue, now: float) -> None:
        """Move requests that got KV out of the queue, and those that lost it in."""
        held = self._held
        for req in packer.admitted:
            queue.remove(req)
            held[req.request_id] = req
        for req in packer.preempted:  # a protected request stays out of the queue
            if not (req.block_ids or req.host_block_ids or req.protected is not None):
                del held[req.request_id]
                queue.add(req, now)

    # --- executor reports --------------------------------------------------------------
    def update_from_output(
        self, out: SchedulerOutput, results: Mapping[str, StepResult], now: float
    ) -> SchedulerUpdate:
        """Apply one iteration's results (`now`: when it ended)."""
        elapsed = max(0.0, now - out.now)
        get, capacity = results.get, self.capacity_tokens
        finish, call = StepEvent.FINISH, StepEvent.CALL
        prefix, bs = self.prefix, self.config.block_size
        for chunk in out.chunks:  # runs for every request of every iteration: kept lean
            req = chunk.request
            if req.finish_time is not None:
                continue  # aborted while the iteration ran
            req.num_computed_tokens += chunk.num_tokens
            req.exec_time += elapsed
            if prefix is not None and req.num_computed_tokens // bs > req.num_hashed_blocks:
                prefix.cache_computed(req)  # a block filled up: later requests may hit it
            if not chunk.sample:
                continue
            result = get(req.request_id, _NO_EVENT)
            req.append_generated(result.token_id, now)
            event = result.event
            if event is finish:
                if result.finish_reason is FinishReason.TOOL_CALLS and self._keeps_session(req):
                    self._start_call(req, result, now, client=True)
                else:
                    self._finish(req, result.finish_reason, now)
            elif req.num_tokens + 1 > capacity or req.generated_limit_reached():
                self._finish(req, FinishReason.LENGTH, now)
            elif event is call:
                self._start_call(req, result, now)
        return self._take_update()

    def _keeps_session(self, req: Request) -> bool:
        return (
            self.sessions is not None
            and req.token_ids is not None
            and req.num_tokens + 1 <= self.capacity_tokens
        )

    def _start_call(
        self, req: Request, result: StepResult, now: float, client: bool = False
    ) -> None:
        """A call starts: a server tool's (`calls_started`), or, with `client`, a
        client's: the request ended with "tool_calls" and is kept as a session."""
        if self.learner is not None:
            self.learner.observe_segment(req, True)
        Protection.segment_done(req)
        self.thrash.segment_ended(req)
        self._drop_runnable(req)
        self._paused[req.request_id] = req
        tool = client_key(result.tool) if client else result.tool
        req.calls.append(CallRecord(start=now, tool=tool, args_len=result.args_len))
        if self.policy.discard_on_call:
            policy = ContextPolicy.DISCARD
        else:
            if self.predictor is not None and (result.tool is not None or self.learner):
                self._apply_prediction(req, None)  # the call is known now: a better guess
            policy = (
                self.policy.call_policy(req, now)
                if self.policy.owns_context_policy and self.config.forced_context_policy is None
                else self._choose_policy(req)
            )
        self.memory.pause(req, policy, discard_now=self.policy.discard_on_call, soft=client)
        if self.policy.discard_on_call:
            self._update.kv_discarded.append(req.request_id)
        if client:
            assert self.sessions is not None
            self.sessions.add(req)
            self._update.sessions_paused.append(req)
        else:
            self._update.calls_started.append(StartedCall(req, policy))
        self.policy.on_call(req, now)

    def _continue_session(self, old: Request, req: Request, now: float) -> None:
        """`req` continues the paused session `old` (`sessions.py`): the client's round
        trip is learned, `req` takes old's KV over if its prompt extends it (else old's
        KV goes to the prefix cache), and `old` finishes ("tool_calls", its turn)."""
        status = old.status
        if extends(old, req):
            take_over_kv(old, req, self.config.block_size)
            req.status = _RESUMED[status] if req.num_computed_tokens else RequestStatus.WAITING
        self._finish(old, FinishReason.TOOL_CALLS, now)  # KV not taken over: to the cache
        call = old.calls[-1]
        call.end = now
        call.returned_tokens = max(0, req.num_tokens - old.num_tokens)
        call.policy = _APPLIED[status]
        if self.learner is not None:
            self.learner.observe_call(old)  # the client's round trip, under client_key

    def _choose_policy(self, req: Request) -> ContextPolicy:
        """The min-waste policy at a call. L_other is the *other* running requests'
        tokens: the caller was running when `running_tokens()` was counted, so its own
        tokens come off (as `PlanningPolicy.planned_policy` does)."""
        if self.config.forced_context_policy is not None:
            return self.config.forced_context_policy
        return choose_context_policy(
            req.num_tokens,
            req.pred_call_time or 0.0,
            max(0, self.running_tokens() - req.num_computed_tokens),
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
        if self.learner is not None:
            self.learner.observe_call(req)
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
        self._peek_prefix(req)
        self.policy.on_return(req, applied, now)
        self._add_runnable(req, now)
        self._update.resumed.append(request_id)
        return self._take_update()

    def abort(
        self, request_id: str, now: float, reason: FinishReason = FinishReason.ABORT
    ) -> SchedulerUpdate:
        """Finish a live request as aborted (an unknown id changes nothing); `reason`
        ERROR: the executor failed on it (a forward that raised)."""
        req = self._runnable.get(request_id) or self._paused.get(request_id)
        if req is not None:
            if req.in_call and not (self.sessions is not None and request_id in self.sessions):
                req.calls[-1].end = now
                self._aborted_in_call.add(request_id)
            self._finish(req, reason, now)
        return self._take_update()


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
