"""AugServe: value density over space-time cost, refined at every return (PAPER.md section 3).

theta = V / C with V = 1 + beta * w (w: milliseconds since last scheduled) and
C the space-time cost of the current segment: estimated on arrival from the
prediction, refined on each return with the realized returned length and the
context policy actually applied during the call.
"""

from __future__ import annotations

from typing import Any

from augserve.core.request import ContextPolicy, Request
from augserve.sched.costs import c_call, c_decode, c_prefill, c_resume, c_return
from augserve.sched.policies.base import PlanningPolicy


class AugServePolicy(PlanningPolicy):
    name = "augserve"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._beta_ms = self.config.beta * 1000.0  # beta is per millisecond of waiting

    def _segment_tail(self, req: Request, ctx_start: int) -> float:
        """C^decode of the predicted output plus C^call of the predicted call."""
        out = max(1.0, req.pred_output_len)
        cost = c_decode(ctx_start, out, self.tau_iter)
        ctx_at_call = int(ctx_start + out)
        policy = self.planned_policy(req, ctx_at_call)
        if policy is not None and req.pred_call_time is not None:
            cost += c_call(policy, ctx_at_call, req.pred_call_time, self.cost)
        return cost

    def arrival_cost(self, req: Request) -> float:
        """C_i,1 = C^prefill(L_p) + C^decode(L_p, l_out) + C^call(p^)."""
        return c_prefill(req.prompt_len, self.cost) + self._segment_tail(req, req.prompt_len)

    def return_cost(self, req: Request, applied: ContextPolicy) -> float:
        """C_i,k = C^return(L~, r) + Resumption(p_applied) + C^decode(L~ + r, l_out) + C^call."""
        returned = req.calls[-1].returned_tokens
        ctx_at_call = req.num_tokens - returned
        feedback = c_return(ctx_at_call, returned, self.cost) + c_resume(
            applied, ctx_at_call, self.cost
        )
        return feedback + self._segment_tail(req, req.num_tokens)

    def on_arrival(self, req: Request, now: float) -> None:
        req.cost = max(self.arrival_cost(req), 1e-12)

    def on_return(self, req: Request, applied: ContextPolicy, now: float) -> None:
        req.cost = max(self.return_cost(req, applied), 1e-12)

    def preempt_key(self, req: Request) -> tuple[Any, ...]:
        """Value density without aging (V = 1): cheaper segments may preempt dearer ones."""
        return (req.cost, req.queue_time, req.request_id)

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        req.priority = (1.0 + self._beta_ms * (now - req.last_scheduled_time)) / req.cost
        return (-req.priority, req.queue_time, req.request_id)
