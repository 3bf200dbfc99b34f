"""What the scheduler does with a request's KV when it makes an external call (docs/design.md,
call handling; docs/paper.md sections 2 and 6).

One strategy object, chosen once when the scheduler builds its policy
(`make_call_handling`), as vLLM and INFERCEPT each hard-wire one:

- `DiscardAtCall` (vLLM, SSJF): the call ends the request's stay; its KV is freed
  at once and, back from the call, it joins the back of the queue.
- `Fixed` (`SchedulerConfig.forced_context_policy`: tests, ablations): every call
  gets the same context policy.
- `MinWaste` (INFERCEPT and the policies built on it): the min-waste policy of
  `context_policy.py` at the call, chosen again every iteration while the KV is
  still on device (`replan.py`, where `reevaluate_paused`).
- `PolicyChooses` (Continuum): the ranking policy picks the context policy
  (`call_policy`) and releases pins whose time is up (`replan`).

Every strategy but `DiscardAtCall` keeps the KV on device at the call and lets
lazy eviction apply the planned policy when memory is needed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from augserve.core.config import SchedulerConfig
from augserve.core.latency import LatencyModel
from augserve.core.prediction import OnlineLearner
from augserve.core.request import ContextPolicy, Request
from augserve.sched.context_policy import min_waste_policy
from augserve.sched.kv_manager import KVCacheManager
from augserve.sched.replan import Replanner


class ChoosingPolicy(Protocol):
    """What `PolicyChooses` asks of the ranking policy (`RankingPolicy` answers it)."""

    def call_policy(self, req: Request, now: float) -> ContextPolicy: ...

    def replan(self, in_call: Mapping[str, Request], now: float) -> list[Request]: ...


Refresh = Callable[[Request, "str | None"], None]  # re-predict a request at a call to `tool`


class CallHandling:
    """Keep the KV on device at the call, with the context policy `choose` plans
    once `refresh` has re-predicted the request (the call is known now)."""

    def __init__(self, kv: KVCacheManager, refresh: Refresh) -> None:
        self.kv = kv
        self.refresh = refresh

    def at_call(self, req: Request, tool: str | None, now: float, soft: bool) -> ContextPolicy:
        """The request just paused in a call to `tool`: plan its KV."""
        self.refresh(req, tool)
        policy = self.choose(req, now)
        self.kv.pause(req, policy, discard_now=False, soft=soft)
        return policy

    def choose(self, req: Request, now: float) -> ContextPolicy:
        raise NotImplementedError

    def at_return(self, req: Request, now: float) -> None:
        """The call came back (the request is runnable again)."""

    def each_iteration(self, now: float, running_tokens: int) -> None:
        """Before each iteration's packing: plans of paused requests may change."""

    def forget(self, request_id: str) -> None:
        """The request left its call."""


class DiscardAtCall(CallHandling):
    """vLLM: free the KV at once; back from the call, the request queues anew."""

    def at_call(self, req: Request, tool: str | None, now: float, soft: bool) -> ContextPolicy:
        self.kv.pause(req, ContextPolicy.DISCARD, discard_now=True, soft=soft)
        return ContextPolicy.DISCARD

    def at_return(self, req: Request, now: float) -> None:
        req.queue_time = now


class Fixed(CallHandling):
    """The same context policy at every call."""

    def __init__(self, kv: KVCacheManager, refresh: Refresh, policy: ContextPolicy) -> None:
        super().__init__(kv, refresh)
        self.policy = policy

    def choose(self, req: Request, now: float) -> ContextPolicy:
        return self.policy


class MinWaste(CallHandling):
    """INFERCEPT: the min-waste policy at the call, re-chosen each iteration by the
    `replanner` (None: kept)."""

    def __init__(
        self,
        kv: KVCacheManager,
        refresh: Refresh,
        config: SchedulerConfig,
        latency: LatencyModel,
        running_tokens: Callable[[], int],
        replanner: Replanner | None,
    ) -> None:
        super().__init__(kv, refresh)
        self.config = config
        self.latency = latency
        self.running_tokens = running_tokens
        self.replanner = replanner

    def choose(self, req: Request, now: float) -> ContextPolicy:
        """L_other is the *other* running requests' tokens: the caller was running when
        `running_tokens()` was counted, so its own tokens come off."""
        other = max(0, self.running_tokens() - req.num_computed_tokens)
        call = req.pred_call_time or 0.0
        return min_waste_policy(self.config, self.latency, req.num_tokens, call, other)

    def each_iteration(self, now: float, running_tokens: int) -> None:
        if self.replanner is not None:
            self.replanner.run(now, running_tokens)

    def forget(self, request_id: str) -> None:
        if self.replanner is not None:
            self.replanner.forget(request_id)


class PolicyChooses(CallHandling):
    """Continuum: the ranking policy's own choice, and its expired pins let go."""

    def __init__(self, kv: KVCacheManager, refresh: Refresh, policy: ChoosingPolicy) -> None:
        super().__init__(kv, refresh)
        self.policy = policy

    def choose(self, req: Request, now: float) -> ContextPolicy:
        return self.policy.call_policy(req, now)

    def each_iteration(self, now: float, running_tokens: int) -> None:
        for req in self.policy.replan(self.kv.in_call, now):
            self.kv.replan(req, ContextPolicy.DISCARD)


def make_call_handling(
    kind: type[CallHandling],
    policy: ChoosingPolicy,
    config: SchedulerConfig,
    kv: KVCacheManager,
    latency: LatencyModel,
    running_tokens: Callable[[], int],
    learner: OnlineLearner | None,
    refresh: Refresh,
) -> CallHandling:
    """The strategy `kind` the policy declares (`RankingPolicy.call_handling`), unless
    the config forces one context policy on every call (vLLM's discard still wins)."""
    if kind is DiscardAtCall:
        return DiscardAtCall(kv, refresh)
    if config.forced_context_policy is not None:
        return Fixed(kv, refresh, config.forced_context_policy)
    if kind is PolicyChooses:
        return PolicyChooses(kv, refresh, policy)
    replanner = None
    if config.reevaluate_paused:
        replanner = Replanner(kv, latency, config.block_size, learner)
    return MinWaste(kv, refresh, config, latency, running_tokens, replanner)
