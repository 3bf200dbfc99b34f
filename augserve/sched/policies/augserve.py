"""AugServe: value density over space-time cost, refined at every return (docs/paper.md section 3).

theta = V / C with V = 1 + beta * w (w: milliseconds since last scheduled) and
C the space-time cost of the current segment: estimated on arrival from the
prediction, refined on each return with the realized returned length and the
context policy actually applied during the call.

By default (docs/paper.md section 3, revised) C covers what remains of the segment
at each iteration: the decode term runs over the predicted tokens still to come,
C^decode(L_now, max(1, l_out - generated)), and the segment's head (prefill on
arrival, feedback after a return) counts until the segment's first token. The
call term is planned once per segment (the min-waste policy at the predicted
context of the call) and cached. `segment_cost=True` keeps Algorithm 1's
reading, C fixed from the arrival or the return.
"""

from __future__ import annotations

from typing import Any

from augserve.core.request import ContextPolicy, Request
from augserve.sched.kinetic import KineticQueue
from augserve.sched.policies.base import PlanningPolicy, PolicyDefaults
from augserve.sched.ranking import HeapQueue, RankQueue
from augserve.sched.spacetime import (
    call_cost,
    decode_cost,
    prefill_cost,
    resume_cost,
    return_cost,
    scheduling_value,
    value_density,
)

_MIN_COST = 1e-12


class AugServePolicy(PlanningPolicy):
    name = "augserve"
    # the paper's policy as the paper ran it (ours, augserve-slo, caches prefixes); its
    # cost grows with the context, so its preemption order moves: protection applies
    defaults = PolicyDefaults(dynamic_budget=True, prefix_caching=False, protection=True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.segment_cost = self.config.segment_cost
        self._bk = self.config.beta * 1000.0  # `scheduling_value`'s factor, per second
        self._head: dict[str, float] = {}  # request id -> prefill / feedback term of the segment
        self._call: dict[str, float] = {}  # request id -> C^call of the planned policy
        self._seg: dict[str, float] = {}  # request id -> C of the segment (Algorithm 1)
        self._req: dict[str, Request] = {}  # request id -> the request (its progress)

    # --- the cost terms -----------------------------------------------------------------
    def _planned_call(self, req: Request, ctx_start: int) -> float:
        """C^call of the predicted call, at the context the segment will have reached."""
        ctx_at_call = int(ctx_start + max(1.0, req.pred_output_len))
        policy = self.planned_policy(req, ctx_at_call)
        if policy is None or req.pred_call_time is None:
            return 0.0
        return call_cost(policy, ctx_at_call, req.pred_call_time, self.latency)

    def _segment_tail(self, req: Request, ctx_start: int, call: float) -> float:
        """C^decode of the predicted output plus `call` (C^call of the predicted call)."""
        return decode_cost(ctx_start, max(1.0, req.pred_output_len), self.tau_iter) + call

    def arrival_cost(self, req: Request, call: float | None = None) -> float:
        """C_i,1 = C^prefill(L_p - cached) + C^decode(L_p, l_out) + C^call(p^) (`on_arrival`'s
        C; `call`: C^call when already planned)."""
        if call is None:
            call = self._planned_call(req, req.prompt_len)
        return self._prefill_head(req) + self._segment_tail(req, req.prompt_len, call)

    def _prefill_head(self, req: Request) -> float:
        """C^prefill of the prompt less what the prefix cache holds of it."""
        return prefill_cost(req.prompt_len - req.num_cached_tokens, self.latency)

    def feedback_cost(
        self, req: Request, applied: ContextPolicy, call: float | None = None
    ) -> float:
        """C_i,k = C^return(L~, r) + Resumption(p_applied) + C^decode(L~ + r, l_out) + C^call
        (`on_return`'s C; `call`: C^call when already planned)."""
        if call is None:
            call = self._planned_call(req, req.num_tokens)
        return self._feedback(req, applied) + self._segment_tail(req, req.num_tokens, call)

    def _feedback(self, req: Request, applied: ContextPolicy) -> float:
        returned = req.calls[-1].returned_tokens
        ctx_at_call = req.num_tokens - returned
        # a discarded context recomputes only what the prefix cache lost of it
        lost = ctx_at_call - min(req.num_cached_tokens, ctx_at_call)
        redo = lost if applied is ContextPolicy.DISCARD else ctx_at_call
        return return_cost(ctx_at_call, returned, self.latency) + resume_cost(
            applied, redo, self.latency
        )

    def remaining_cost(self, req: Request) -> float:
        """C of what remains of the segment: head (until the segment's first token) +
        C^decode(L_now, max(1, l_out - generated)) + C^call (planned once per segment)."""
        rid, gen = req.request_id, req.segment_generated
        rem = req.pred_output_len - gen
        if rem < 1.0:
            rem = 1.0
        head = self._head[rid] if gen == 0 else 0.0
        cost = head + decode_cost(req.num_tokens, rem, self.tau_iter) + self._call[rid]
        return cost if cost > _MIN_COST else _MIN_COST

    def current_cost(self, req: Request) -> float:
        """The C the request is ranked by now (either reading of docs/paper.md section 3)."""
        if self.segment_cost:
            return self._seg[req.request_id]
        return self.remaining_cost(req)

    def cost(self, request_id: str) -> float:
        """The space-time cost C the request is ranked by (at its current progress)."""
        if self.segment_cost:
            return self._seg[request_id]
        return self.remaining_cost(self._req[request_id])

    def density(self, req: Request, now: float) -> float:
        """theta = V / C at `now`."""
        waited = now - req.last_scheduled_time
        return value_density(scheduling_value(waited, self.config.beta), self.current_cost(req))

    # --- hooks -----------------------------------------------------------------------------
    def _start_segment(self, req: Request, head: float, call: float, seg: float) -> None:
        rid = req.request_id
        self._head[rid], self._call[rid], self._req[rid] = head, call, req
        self._seg[rid] = max(seg, _MIN_COST)

    def on_arrival(self, req: Request, now: float) -> None:
        call = self._planned_call(req, req.prompt_len)
        head = self._prefill_head(req)
        self._start_segment(req, head, call, self.arrival_cost(req, call))

    def on_return(self, req: Request, applied: ContextPolicy, now: float) -> None:
        call = self._planned_call(req, req.num_tokens)
        head = self._feedback(req, applied)
        self._start_segment(req, head, call, self.feedback_cost(req, applied, call))

    def forget(self, request_id: str) -> None:
        for table in (self._head, self._call, self._seg, self._req):
            table.pop(request_id, None)

    def preempt_key(self, req: Request) -> tuple[Any, ...]:
        """Value density without aging (V = 1): cheaper segments may preempt dearer ones."""
        return (self.current_cost(req), req.queue_time, req.request_id)

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        """(-theta, queue time, id): `density` inlined (the same float operations, in the
        same order: the packer keys every KV holder every iteration)."""
        rid = req.request_id
        if self.segment_cost:
            cost = self._seg[rid]
        else:
            gen = req.segment_generated
            rem = req.pred_output_len - gen
            if rem < 1.0:
                rem = 1.0
            cost = (
                (self._head[rid] if gen == 0 else 0.0)
                + self.tau_iter * (rem * req.num_tokens + rem * (rem + 1) / 2.0)
                + self._call[rid]
            )
            if cost < _MIN_COST:
                cost = _MIN_COST
        value = 1.0 + self._bk * (now - req.last_scheduled_time)
        return (-(value / cost), req.queue_time, rid)

    def make_queue(self) -> RankQueue:
        """A kinetic heap: a waiting request's density grows linearly in time."""
        if self._bk <= 0.0:
            return HeapQueue(self.key)
        return KineticQueue(self._bk, self.current_cost)
