"""First-come-first-served baselines: vLLM and INFERCEPT (docs/paper.md section 6)."""

from __future__ import annotations

from typing import Any, ClassVar

from augserve.core.request import Request, RequestStatus
from augserve.sched.call_handling import CallHandling, DiscardAtCall
from augserve.sched.policies.base import PAPER_DEFAULTS, PolicyDefaults, RankingPolicy


class VLLMPolicy(RankingPolicy):
    """vLLM: a call ends the request's stay (KV freed); on return it re-queues at the back.

    Running requests keep their place; waiting requests follow in queue order.
    """

    name = "vllm"
    defaults = PAPER_DEFAULTS
    call_handling: ClassVar[type[CallHandling]] = DiscardAtCall

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        return (req.status is not RequestStatus.RUNNING, req.queue_time, req.request_id)


class VLLMAPCPolicy(VLLMPolicy):
    """vLLM v1 with automatic prefix caching: FCFS, the request ends at the call and its
    blocks stay in the prefix cache until evicted; on return it is a new request (at the
    back of the queue) whose prefix may hit."""

    name = "vllm-apc"
    defaults = PolicyDefaults()


class InferceptPolicy(RankingPolicy):
    """INFERCEPT: FCFS by original arrival, also after a return; min-waste context policy."""

    name = "infercept"  # the base key: (queue time = original arrival, id)
    defaults = PAPER_DEFAULTS
