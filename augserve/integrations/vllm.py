"""AugServe scheduling inside vLLM's v1 engine: a `scheduler_cls` (the only module importing vLLM).

    vllm serve MODEL --scheduler-cls augserve.integrations.vllm.AugServeScheduler \\
        --additional-config '{"augserve": {"profile": "llama3-70b-4xa100"}}'

`AugServeScheduler` subclasses vLLM's `AsyncScheduler` and keeps all of its
machinery (chunked prefill, prefix caching, preemption, connectors, spec decode,
structured output); before each step it

1. copies every queued request's token counts into its mirror in `PolicyBridge`;
2. orders `running` by our policy's preempt key (non-aging: vLLM offers running
   requests the budget in list order and preempts the last one) and both waiting
   queues by the policy's sort key (AugServe: value density, which ages);
3. frees the client sessions' turns it holds that are past their time or in the
   step's way (`vllm_memory.py`), and sets the step's token budget to our dynamic
   budget over vLLM's free blocks (its free count includes the evictable
   prefix-cache blocks) and the held ones (our reclaimable);
4. where the policy gates admission (`augserve-slo`), shows vLLM only the waiting
   requests the gate lets through this step (`overload.py`).

Arrivals are predicted and costed in `add_request`; a turn that ends is
remembered by session (`session_id`, or `augserve_session` in the extra args) so
that its resubmission is refined as a call's return, and where our policy
chooses Preserve for the call predicted after it, its KV blocks are held until
that resubmission is scheduled (`holds.py`); resumable streaming-input sessions
are Preserve. Options: `augserve.integrations.options`. The scheduler
interface is not public in vLLM: versions in `SUPPORTED_VLLM` are the tested ones.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import vllm  # type: ignore[import-not-found,unused-ignore]
from vllm.logger import init_logger  # type: ignore[import-not-found,unused-ignore]
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # type: ignore[import-not-found,unused-ignore]
from vllm.v1.core.sched.output import SchedulerOutput  # type: ignore[import-not-found,unused-ignore]
from vllm.v1.core.sched.request_queue import RequestQueue, SchedulingPolicy  # type: ignore[import-not-found,unused-ignore]
from vllm.v1.core.sched.scheduler import Scheduler  # type: ignore[import-not-found,unused-ignore]
from vllm.v1.request import Request, RequestStatus  # type: ignore[import-not-found,unused-ignore]

from augserve.core.request import ContextPolicy, Segment
from augserve.integrations.bridge import PolicyBridge
from augserve.integrations.engine_facts import EngineFacts
from augserve.integrations.options import load_options
from augserve.integrations.plan import hold_of, kind_of, plan_for, session_of
from augserve.integrations.vllm_memory import KVMemoryMixin

SUPPORTED_VLLM = ("0.32.0", "0.33.0")
STATS_INTERVAL_S = 60.0
logger = init_logger("vllm.augserve")
_ENDED_OK = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)


def _extra(request: Request) -> dict[str, Any] | None:
    params = request.sampling_params
    return None if params is None else params.extra_args


class _AugServeMixin(KVMemoryMixin):
    """Our ranking and budget over a vLLM v1 scheduler (see the module docstring)."""

    augserve: PolicyBridge

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        sched: Any = self
        if vllm.__version__ not in SUPPORTED_VLLM:
            logger.warning(
                "augserve: vLLM %s is untested (tested: %s); the scheduler interface is "
                "not public", vllm.__version__, ", ".join(SUPPORTED_VLLM),
            )  # fmt: skip
        if sched.policy != SchedulingPolicy.FCFS:
            raise ValueError(
                "AugServeScheduler orders the queues itself: run vLLM with "
                "--scheduling-policy fcfs (the default)"
            )
        extra = sched.vllm_config.additional_config
        options = load_options(extra if isinstance(extra, dict) else None)
        facts = EngineFacts(
            block_size=sched.block_size,
            num_blocks=sched.cache_config.num_gpu_blocks,
            max_batch_tokens=sched.max_num_scheduled_tokens,
            max_num_seqs=sched.max_num_running_reqs,
        )
        self.augserve = PolicyBridge(options, facts)
        self._static_budget: int = sched.max_num_scheduled_tokens
        self._released: set[str] = set()  # paused sessions whose KV was discarded
        self._init_holds(options.session_ttl_s)
        self._stats = {"steps": 0, "budget_sum": 0, "shrunk": 0, "gated": 0}
        self._stats_at = time.monotonic()
        logger.info(
            "augserve scheduler: policy %s, predictor %s, profile %s, %s budget (T_max %d), "
            "%d blocks of %d tokens", options.policy, options.predictor, options.profile,
            "dynamic" if self.augserve.dynamic else "static", facts.max_batch_tokens,
            facts.num_blocks, facts.block_size,
        )  # fmt: skip

    # --- arrivals, turns, ends ------------------------------------------------------
    def add_request(self, request: Request) -> None:
        sched: Any = self
        existing: Request | None = sched.requests.get(request.request_id)
        paused = existing is not None and existing.status == RequestStatus.WAITING_FOR_STREAMING_REQ
        super().add_request(request)  # type: ignore[misc]
        now = time.monotonic()
        if existing is None:
            self._arrive(request, now)
        elif paused and existing.status == RequestStatus.WAITING:
            if existing.request_id in self._released:  # its KV went at the pause
                self._released.discard(existing.request_id)
                existing.num_computed_tokens = 0  # recompute (prefix-cache hits aside)
            self.augserve.resume_stream(
                existing.request_id,
                existing.num_tokens,
                existing.num_computed_tokens,
                now,
                self._plan(request),
            )

    def _arrive(self, request: Request, now: float) -> None:
        extra = _extra(request)
        session = session_of(extra, request.session_id)
        cached = 0
        self._successor(session, request.request_id)
        if session is not None and self.augserve.has_ended_turn(session, now):
            sched: Any = self
            cached = sched.kv_cache_manager.get_computed_blocks(request)[1]
        self.augserve.arrive(
            request.request_id,
            request.num_tokens,
            now,
            self._plan(request),
            session=session,
            cached_tokens=cached,
            resumable=request.resumable,
            kind=kind_of(extra),
            max_tokens=request.max_tokens,
            hold=self._hold(request),
        )

    @staticmethod
    def _hold(request: Request) -> ContextPolicy | None:
        try:
            return hold_of(_extra(request))
        except ValueError as exc:
            logger.warning("augserve: request %s: %s (ignored)", request.request_id, exc)
            return None

    def _plan(self, request: Request) -> list[Segment] | None:
        """The client's `augserve_plan`, else None (the predictor plans the request)."""
        try:
            return plan_for(_extra(request))
        except ValueError as exc:
            logger.warning("augserve: request %s: %s (plan ignored)", request.request_id, exc)
            return None

    def _handle_stopped_request(self, request: Request) -> bool:
        finished: bool = super()._handle_stopped_request(request)  # type: ignore[misc]
        sched: Any = self
        if not finished:  # a streaming session ended a turn: a call of our policy's
            now = time.monotonic()
            waits = request.status == RequestStatus.WAITING_FOR_STREAMING_REQ
            ctx = request.num_computed_tokens
            policy = self.augserve.stream_paused(request.request_id, now, ctx)
            if waits and policy is ContextPolicy.DISCARD:
                self._release(request)
            if self.augserve.options.decision_log:
                free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
                logger.info("augserve: pause %s: %s, %d free blocks", request.request_id,
                            policy.value, free)  # fmt: skip
            if request.status == RequestStatus.WAITING:  # its next input was queued
                self.augserve.resume_stream(
                    request.request_id,
                    request.num_tokens,
                    request.num_computed_tokens,
                    now,
                    self._plan(request),
                )
        return finished

    def _release(self, request: Request) -> None:
        """Discard a paused session's KV: its blocks go to vLLM's prefix cache (evictable,
        hits where they survive), and it recomputes the rest when its next input comes.
        Its computed count stays until then: vLLM 0.32 keeps the context up to it when
        the input comes (`_update_request_as_session`); `add_request` zeroes it after."""
        sched: Any = self
        sched.kv_cache_manager.free(request)
        self._released.add(request.request_id)
        holding: RequestQueue = sched.kv_holding_waiting
        if request in holding:  # vLLM 0.32 queues a paused session as a KV holder
            holding.remove_request(request)
            sched.waiting.add_request(request)

    def _free_request(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        session = session_of(_extra(request), request.session_id)
        call_s = self.augserve.finish(
            request.request_id,
            now,
            num_tokens=request.num_tokens,
            num_output=request.num_output_tokens,
            session=session,
            ended_ok=request.status in _ENDED_OK,
        )
        if call_s is not None and session is not None:
            self._hold_at_free(request.request_id, session, call_s, now)  # `_free_blocks`
        try:
            result = super()._free_request(request, *args, **kwargs)  # type: ignore[misc]
        finally:
            self._hold_next = None
        self._released.discard(request.request_id)
        self._release_after_step(now, (), gone=(request.request_id,))
        return result

    # --- each step -------------------------------------------------------------------
    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        sched: Any = self
        now = time.monotonic()
        candidates = self._rank(now)
        sched.max_num_scheduled_tokens = self._static_budget
        held = self._release_before_step(now)
        free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
        budget = self.augserve.token_budget(free, held)
        sched.max_num_scheduled_tokens = self._static_budget if budget is None else budget
        deferred = self._gate_waiting(held)
        try:
            out: SchedulerOutput = super().schedule(*args, **kwargs)  # type: ignore[misc]
        finally:
            self._ungate(deferred)
        self._release_after_step(now, out.num_scheduled_tokens)
        self._stats["gated"] += bool(deferred)
        self.augserve.counts["gated_steps"] += bool(deferred)
        self.augserve.scheduled(out.num_scheduled_tokens, candidates, now)
        self._count(sched.max_num_scheduled_tokens, now)
        if self.augserve.options.decision_log:
            self.augserve.decisions.append(
                {
                    "now": now,
                    "budget": sched.max_num_scheduled_tokens,
                    "free_blocks": free,
                    "candidates": candidates,
                    "scheduled": dict(out.num_scheduled_tokens),
                }
            )
        return out

    def _count(self, budget: int, now: float) -> None:
        """Counters, logged once a minute while the engine works."""
        st = self._stats
        st["steps"] += 1
        st["budget_sum"] += budget
        st["shrunk"] += budget < self._static_budget
        if now - self._stats_at < STATS_INTERVAL_S:
            return
        c = self.augserve.counts
        logger.info(
            "augserve: %d steps, mean budget %.0f (%d below T_max, %d gated); %d arrivals, "
            "returns %d preserve / %d discard; session turns held %d (%s)", st["steps"],
            st["budget_sum"] / st["steps"], st["shrunk"], st["gated"], c["arrivals"],
            c["returns_preserve"], c["returns_discard"], len(self._holds), self._holds.counts,
        )  # fmt: skip
        self._stats = {"steps": 0, "budget_sum": 0, "shrunk": 0, "gated": 0}
        self._stats_at = now

    def _rank(self, now: float) -> list[str]:
        """Sync the mirrors, then order `running` and the waiting queues in place."""
        sched: Any = self
        bridge = self.augserve
        running_tokens = 0
        for req in sched.running:
            bridge.sync(req.request_id, req.num_tokens, req.num_computed_tokens,
                        req.num_output_tokens, running=True, now=now)  # fmt: skip
            running_tokens += req.num_computed_tokens
        queues: list[RequestQueue] = [sched.kv_holding_waiting, sched.waiting]
        for queue in queues:
            for req in queue:
                bridge.sync(req.request_id, req.num_tokens, req.num_computed_tokens,
                            req.num_output_tokens, running=False)  # fmt: skip
        bridge.set_running_tokens(running_tokens)
        rank = _positions(bridge.preempt_order(r.request_id for r in sched.running))
        sched.running.sort(key=lambda r: rank[r.request_id])
        candidates = [r.request_id for r in sched.running]
        for queue in queues:
            ordered = _positions(bridge.order((r.request_id for r in queue), now))
            items = sorted(queue, key=lambda r: ordered[r.request_id])
            queue.clear()  # type: ignore[attr-defined,unused-ignore]
            queue.extend(items)  # type: ignore[attr-defined,unused-ignore]
            candidates += [r.request_id for r in items]
        return candidates


def _positions(ids: Iterable[str]) -> dict[str, int]:
    return {rid: i for i, rid in enumerate(ids)}


class AugServeScheduler(_AugServeMixin, AsyncScheduler):  # type: ignore[misc,unused-ignore]
    """vLLM's async scheduler with AugServe's ranking and dynamic budget."""


class AugServeSyncScheduler(_AugServeMixin, Scheduler):  # type: ignore[misc,unused-ignore]
    """The same over vLLM's synchronous scheduler (vLLM turns async scheduling off)."""
