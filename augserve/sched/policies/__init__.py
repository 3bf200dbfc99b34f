"""Ranking policies by name: `--policy` everywhere takes these names."""

from __future__ import annotations

from augserve.core.config import SchedulerConfig
from augserve.core.cost import CostModel
from augserve.sched.policies.augserve import AugServePolicy
from augserve.sched.policies.base import RankingPolicy
from augserve.sched.policies.fcfs import InferceptPolicy, VLLMPolicy
from augserve.sched.policies.mars import MARSPolicy
from augserve.sched.policies.ssjf import SSJFPolicy

POLICIES: dict[str, type[RankingPolicy]] = {
    "vllm": VLLMPolicy,
    "infercept": InferceptPolicy,
    "ssjf": SSJFPolicy,
    "mars": MARSPolicy,
    "augserve": AugServePolicy,
}


def make_policy(config: SchedulerConfig, cost: CostModel) -> RankingPolicy:
    try:
        cls = POLICIES[config.policy]
    except KeyError:
        raise ValueError(
            f"unknown policy {config.policy!r}; choose from {', '.join(POLICIES)}"
        ) from None
    return cls(config, cost)


__all__ = ["POLICIES", "RankingPolicy", "make_policy"]
