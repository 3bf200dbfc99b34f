"""First-come-first-served baselines: vLLM and INFERCEPT (PAPER.md section 6)."""

from __future__ import annotations

from collections.abc import Sequence

from augserve.core.request import Request, RequestStatus
from augserve.sched.policies.base import RankingPolicy, fcfs_key


class VLLMPolicy(RankingPolicy):
    """vLLM: a call ends the request's stay (KV freed); on return it re-queues at the back.

    Running requests keep their place; waiting requests follow in queue order.
    """

    name = "vllm"
    discard_on_call = True
    requeue_on_return = True

    def order(self, reqs: Sequence[Request], now: float) -> list[Request]:
        return sorted(reqs, key=lambda r: (r.status is not RequestStatus.RUNNING, *fcfs_key(r)))


class InferceptPolicy(RankingPolicy):
    """INFERCEPT: FCFS by original arrival, also after a return; min-waste context policy."""

    name = "infercept"

    def order(self, reqs: Sequence[Request], now: float) -> list[Request]:
        return sorted(reqs, key=fcfs_key)
