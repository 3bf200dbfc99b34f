"""First-come-first-served baselines: vLLM and INFERCEPT (PAPER.md section 6)."""

from __future__ import annotations

from typing import Any

from augserve.core.request import Request, RequestStatus
from augserve.sched.policies.base import RankingPolicy


class VLLMPolicy(RankingPolicy):
    """vLLM: a call ends the request's stay (KV freed); on return it re-queues at the back.

    Running requests keep their place; waiting requests follow in queue order.
    """

    name = "vllm"
    prefix_caching = False  # the paper's baseline, as the paper ran it
    discard_on_call = True
    requeue_on_return = True

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        return (req.status is not RequestStatus.RUNNING, req.queue_time, req.request_id)


class InferceptPolicy(RankingPolicy):
    """INFERCEPT: FCFS by original arrival, also after a return; min-waste context policy."""

    name = "infercept"  # the base key: (queue time = original arrival, id)
    prefix_caching = False  # the paper's baseline, as the paper ran it
