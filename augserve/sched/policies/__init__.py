"""Ranking policies by name: the one registry; `--policy` everywhere takes these names."""

from __future__ import annotations

from augserve.core.config import SchedulerConfig
from augserve.core.latency import LatencyModel
from augserve.sched.policies.augserve import AugServePolicy
from augserve.sched.policies.base import LoadView, RankingPolicy
from augserve.sched.policies.continuum import ContinuumPolicy
from augserve.sched.policies.fcfs import InferceptPolicy, VLLMAPCPolicy, VLLMPolicy
from augserve.sched.policies.mars import MARSPolicy
from augserve.sched.policies.slack import SlackPolicy
from augserve.sched.policies.ssjf import SSJFInferceptPolicy, SSJFPolicy

POLICIES: dict[str, type[RankingPolicy]] = {
    "vllm": VLLMPolicy,
    "vllm-apc": VLLMAPCPolicy,
    "continuum": ContinuumPolicy,
    "infercept": InferceptPolicy,
    "ssjf": SSJFPolicy,
    "ssjf-infercept": SSJFInferceptPolicy,
    "mars": MARSPolicy,
    "augserve": AugServePolicy,
    "augserve-slo": SlackPolicy,
}


def policy_class(name: str) -> type[RankingPolicy]:
    """The class registered under `name`; ValueError names the choices."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(
            f"SchedulerConfig.policy must be one of {', '.join(POLICIES)}, got {name!r}"
        ) from None


def make_policy(config: SchedulerConfig, latency: LatencyModel, load: LoadView) -> RankingPolicy:
    return policy_class(config.policy)(config, latency, load)


def uses_dynamic_budget(config: SchedulerConfig) -> bool:
    """The config's override, else the policy's default."""
    if config.dynamic_budget is not None:
        return config.dynamic_budget
    return policy_class(config.policy).defaults.dynamic_budget


def uses_prefix_caching(config: SchedulerConfig) -> bool:
    """The config's `enable_prefix_caching`, else the policy's default."""
    if config.enable_prefix_caching is not None:
        return config.enable_prefix_caching
    return policy_class(config.policy).defaults.prefix_caching


__all__ = ["POLICIES", "LoadView", "RankingPolicy", "make_policy", "policy_class"]
