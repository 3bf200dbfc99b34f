"""AugServe: value density over space-time cost, refined at every return (PAPER.md section 3).

theta = V / C with V = 1 + beta * w (w: milliseconds since last scheduled) and
C the space-time cost of the current segment: estimated on arrival from the
prediction, refined on each return with the realized returned length and the
context policy actually applied during the call.
"""

from __future__ import annotations

from typing import Any

from augserve.core.request import ContextPolicy, Request
from augserve.sched.policies.base import PlanningPolicy
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
    uses_dynamic_budget = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cost: dict[str, float] = {}  # request id -> C of its current segment

    def _segment_tail(self, req: Request, ctx_start: int) -> float:
        """C^decode of the predicted output plus C^call of the predicted call."""
        out = max(1.0, req.pred_output_len)
        cost = decode_cost(ctx_start, out, self.tau_iter)
        ctx_at_call = int(ctx_start + out)
        policy = self.planned_policy(req, ctx_at_call)
        if policy is not None and req.pred_call_time is not None:
            cost += call_cost(policy, ctx_at_call, req.pred_call_time, self.latency)
        return cost

    def arrival_cost(self, req: Request) -> float:
        """C_i,1 = C^prefill(L_p) + C^decode(L_p, l_out) + C^call(p^)."""
        return prefill_cost(req.prompt_len, self.latency) + self._segment_tail(req, req.prompt_len)

    def feedback_cost(self, req: Request, applied: ContextPolicy) -> float:
        """C_i,k = C^return(L~, r) + Resumption(p_applied) + C^decode(L~ + r, l_out) + C^call."""
        returned = req.calls[-1].returned_tokens
        ctx_at_call = req.num_tokens - returned
        feedback = return_cost(ctx_at_call, returned, self.latency) + resume_cost(
            applied, ctx_at_call, self.latency
        )
        return feedback + self._segment_tail(req, req.num_tokens)

    def cost(self, request_id: str) -> float:
        """The space-time cost C the request is ranked by."""
        return self._cost[request_id]

    def density(self, req: Request, now: float) -> float:
        """theta = V / C at `now`."""
        waited = now - req.last_scheduled_time
        return value_density(scheduling_value(waited, self.config.beta), self._cost[req.request_id])

    def on_arrival(self, req: Request, now: float) -> None:
        self._cost[req.request_id] = max(self.arrival_cost(req), _MIN_COST)

    def on_return(self, req: Request, applied: ContextPolicy, now: float) -> None:
        self._cost[req.request_id] = max(self.feedback_cost(req, applied), _MIN_COST)

    def forget(self, request_id: str) -> None:
        self._cost.pop(request_id, None)

    def preempt_key(self, req: Request) -> tuple[Any, ...]:
        """Value density without aging (V = 1): cheaper segments may preempt dearer ones."""
        return (self._cost[req.request_id], req.queue_time, req.request_id)

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        return (-self.density(req, now), req.queue_time, req.request_id)
