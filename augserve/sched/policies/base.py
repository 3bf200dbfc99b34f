"""The ranking-policy protocol every policy implements, and helpers they share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from augserve.core.config import SchedulerConfig
from augserve.core.cost import CostModel
from augserve.core.request import ContextPolicy, Request


class RankingPolicy:
    """Decides the order in which runnable requests are offered the batch.

    Hooks are called by the `Scheduler`: on arrival (after prediction), when a
    call starts (after the context policy is chosen), when a call returns
    (with the policy that was actually applied), and after each iteration.
    """

    name = "base"
    discard_on_call = False  # vLLM: a call ends the request's stay, KV freed at once
    requeue_on_return = False  # vLLM: a returned request joins the back of the queue
    running_tokens = 0  # tokens held by running requests; the scheduler keeps it current

    def __init__(self, config: SchedulerConfig, cost: CostModel) -> None:
        self.config = config
        self.cost = cost
        self.tau_iter = cost.decode_iter_time()

    def on_arrival(self, req: Request, now: float) -> None:
        """Set up the request's ranking state from its prediction."""

    def on_call(self, req: Request, now: float) -> None:
        """A call started; `req.context_policy` holds the planned policy."""

    def on_return(self, req: Request, applied: ContextPolicy, now: float) -> None:
        """A call returned; `applied` is what really happened to the KV."""

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        """Sort key: lower runs first. Must end with the request id (keys are unique)."""
        return (req.queue_time, req.request_id)

    def preempt_key(self, req: Request) -> tuple[Any, ...]:
        """Who may preempt whom under memory pressure: a lower key may preempt a higher.

        It must not change while requests merely wait (an aging key would let two
        requests preempt each other forever); by default it is the sort key.
        """
        return self.key(req, 0.0)

    def order(self, reqs: Sequence[Request], now: float) -> list[Request]:
        return sorted(reqs, key=lambda r: self.key(r, now))

    def after_schedule(
        self, candidates: Sequence[Request], scheduled: set[str], now: float
    ) -> None:
        """Called once per iteration with the runnable set and those that ran."""


def predicted_remaining(req: Request) -> float:
    """Tokens still to generate in the current segment, by the prediction."""
    return max(1.0, req.pred_output_len - req.segment_generated)


class PlanningPolicy(RankingPolicy):
    """A policy that estimates the context policy of a request's next call."""

    def planned_policy(self, req: Request, ctx_at_call: int) -> ContextPolicy | None:
        """The min-waste policy for the predicted call (None when no call is predicted)."""
        if req.pred_call_time is None:
            return None
        from augserve.sched.costs import choose_context_policy

        if self.config.forced_context_policy is not None:
            return self.config.forced_context_policy
        return choose_context_policy(
            ctx_at_call,
            req.pred_call_time,
            max(0, self.running_tokens - req.num_computed_tokens),
            self.cost,
            allow_swap=self.config.num_host_blocks > 0,
        )
