"""The ranking-policy protocol every policy implements, and helpers they share.

A policy keeps its own per-request state (keyed by request id) and drops it
in `forget`; the `Request` carries only what every policy shares (token
counts, queue time, the predictor's estimates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from augserve.core.config import SchedulerConfig
from augserve.core.latency import LatencyModel
from augserve.core.request import ContextPolicy, Request
from augserve.sched.call_handling import CallHandling, MinWaste
from augserve.sched.context_policy import min_waste_policy
from augserve.sched.ranking import HeapQueue, RankQueue


class LoadView(Protocol):
    """What a policy may ask the scheduler about the load.

    The `Scheduler` also answers `running_batch()` (tokens the running requests
    still have to compute: 1 per decoding request, the rest of a prefill),
    which MARS reads where the view has it.
    """

    def running_tokens(self) -> int:
        """Tokens held by running requests (L_other), as of the last `schedule()`."""
        ...


@dataclass(frozen=True)
class PolicyDefaults:
    """What a policy brings to three config knobs when the config leaves them open.

    dynamic_budget: the token budget follows free + reclaimable KV (AugServe;
        `SchedulerConfig.dynamic_budget`).
    prefix_caching: `SchedulerConfig.enable_prefix_caching`'s default.
    protection: the progress rule of `sched/progress.py` applies
        (`SchedulerConfig.max_preemptions`); not needed where `preempt_key` is a fixed
        order (arrival, predicted length): the lowest key always progresses.
    """

    dynamic_budget: bool = False
    prefix_caching: bool = True
    protection: bool = False


# the paper's baselines and policy as the paper ran them: no prefix cache
PAPER_DEFAULTS = PolicyDefaults(prefix_caching=False)


class RankingPolicy:
    """Decides the order in which runnable requests are offered the batch.

    Hooks are called by the `Scheduler`: on arrival (after prediction), when a
    call starts (after the context policy is chosen), when a call returns
    (with the policy that was actually applied), after each iteration, and
    when a request leaves (`forget`).
    """

    name = "base"
    # what a call does to the KV (`sched/call_handling.py`), built once with the policy
    call_handling: ClassVar[type[CallHandling]] = MinWaste
    defaults: ClassVar[PolicyDefaults] = PolicyDefaults()

    def __init__(self, config: SchedulerConfig, latency: LatencyModel, load: LoadView) -> None:
        self.config = config
        self.latency = latency
        self.load = load
        self.tau_iter = latency.decode_iter_time()

    def on_arrival(self, req: Request, now: float) -> None:
        """Set up the request's ranking state from its prediction."""

    def on_call(self, req: Request, now: float) -> None:
        """A call started; `req.context_policy` holds the planned policy."""

    def on_return(self, req: Request, applied: ContextPolicy, now: float) -> None:
        """A call returned; `applied` is what really happened to the KV."""

    def forget(self, request_id: str) -> None:
        """The request finished or was aborted: drop its state."""

    def call_policy(self, req: Request, now: float) -> ContextPolicy:
        """The context policy of the call the request just started (asked where the
        policy's `call_handling` is `PolicyChooses`)."""
        raise NotImplementedError

    def replan(self, in_call: Mapping[str, Request], now: float) -> list[Request]:
        """Paused requests holding device KV whose KV may now be taken (planned Discard),
        asked every iteration where `call_handling` is `PolicyChooses`."""
        return []

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        """Sort key: lower runs first. Must end with the request id (keys are unique)."""
        return (req.queue_time, req.request_id)

    def preempt_key(self, req: Request) -> tuple[Any, ...]:
        """Who may preempt whom under memory pressure: a lower key may preempt a higher.

        It must not change while requests merely wait (an aging key would let two
        requests preempt each other forever); by default it is the sort key.
        """
        return self.key(req, 0.0)

    def admission_growth(self) -> float | None:
        """The share of the KV holders' predicted growth that admission keeps free
        (`sched/admission.py`); None: admit whenever memory can be had."""
        return None

    def order(self, reqs: Sequence[Request], now: float) -> list[Request]:
        return sorted(reqs, key=lambda r: self.key(r, now))

    def make_queue(self) -> RankQueue:
        """The persistent queue of runnable requests without KV (incremental ranking).

        The default heap is exact for keys that do not change while a request
        waits without KV, as FCFS and SSJF keys; a policy whose keys age or
        move must return a queue that follows them.
        """
        return HeapQueue(self.key)

    def after_schedule(
        self, candidates: Sequence[Request], scheduled: set[str], now: float
    ) -> None:
        """Once per iteration with the runnable set and the ids of those that ran."""


def predicted_remaining(req: Request) -> float:
    """Tokens still to generate in the current segment, by the prediction."""
    return max(1.0, req.pred_output_len - req.segment_generated)


class PlanningPolicy(RankingPolicy):
    """A policy that estimates the context policy of a request's next call."""

    def planned_policy(self, req: Request, ctx_at_call: int) -> ContextPolicy | None:
        """The min-waste policy for the predicted call (None when no call is predicted)."""
        if req.pred_call_time is None:
            return None
        other = max(0, self.load.running_tokens() - req.num_computed_tokens)
        return min_waste_policy(self.config, self.latency, ctx_at_call, req.pred_call_time, other)
