"""The scheduler's knobs in one frozen, validated config (PAPER.md sections 2-6)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from augserve.core.latency import LatencyProfile
from augserve.core.request import ContextPolicy


def _positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value is not None and value <= 0:
            raise ValueError(f"{type(obj).__name__}.{name} must be > 0, got {value}")


@dataclass(frozen=True)
class SchedulerConfig:
    """Every scheduling knob. Times are seconds, memory is blocks of `block_size` tokens.

    policy: ranking policy name, one of `augserve.sched.policies.POLICIES` (the one
        registry; the scheduler checks the name when it builds the policy).
    num_device_blocks / num_host_blocks: KV capacity on the device and the host swap pool.
    max_batch_tokens: T_max, the static token budget (and the dynamic budget's reference).
    dynamic_budget: None takes the policy's default (only `augserve` is dynamic); see
        `augserve.sched.budget.dynamic_token_budget`.
    beta: AugServe's waiting-value weight per millisecond (PAPER.md section 3).
    beta_low / beta_high: clip range of the dynamic budget, in units of T_max.
    swap_budget_blocks: blocks moved each way per iteration; None derives it from the
        cost model (tokens swappable in one decode iteration).
    lazy_eviction: keep Swap/Discard requests' KV on device until memory is needed.
    forced_context_policy: use this policy at every call (tests, ablations).
    scan_on: keep scanning past a request that does not fit (AugServe's packing).
    mars_starvation_limit / mars_quantum: MARS's anti-starvation rule.
    predictor: `oracle`, `noisy:P` or `learned:DIR`, resolved by the faces.
    """

    policy: str = "augserve"
    block_size: int = 16
    num_device_blocks: int = 4096
    num_host_blocks: int = 0
    max_batch_tokens: int = 2048
    max_num_seqs: int = 256
    dynamic_budget: bool | None = None
    beta: float = 5e-5
    beta_low: float = 0.5
    beta_high: float = 2.0
    swap_budget_blocks: int | None = None
    lazy_eviction: bool = True
    forced_context_policy: ContextPolicy | None = None
    scan_on: bool = True
    mars_starvation_limit: int = 100
    mars_quantum: int = 10
    predictor: str = "oracle"

    def __post_init__(self) -> None:
        if not isinstance(self.policy, str) or not self.policy:
            raise ValueError(f"SchedulerConfig.policy must be a policy name, got {self.policy!r}")
        _positive(self, "block_size", "num_device_blocks", "max_batch_tokens", "max_num_seqs")
        _positive(self, "swap_budget_blocks", "mars_starvation_limit", "mars_quantum")
        if self.num_host_blocks < 0:
            raise ValueError(
                f"SchedulerConfig.num_host_blocks must be >= 0, got {self.num_host_blocks}"
            )
        if self.beta < 0:
            raise ValueError(f"SchedulerConfig.beta must be >= 0, got {self.beta}")
        if not 0 < self.beta_low <= 1:
            raise ValueError(f"SchedulerConfig.beta_low must be in (0, 1], got {self.beta_low}")
        if self.beta_high < 1:
            raise ValueError(f"SchedulerConfig.beta_high must be >= 1, got {self.beta_high}")
        if not self.predictor or not isinstance(self.predictor, str):
            raise ValueError(
                f"SchedulerConfig.predictor must be a spec string, got {self.predictor!r}"
            )

    def with_(self, **changes: Any) -> SchedulerConfig:
        return replace(self, **changes)


def scheduler_config_for(
    profile: LatencyProfile, policy: str, block_size: int = 16, **overrides: Any
) -> SchedulerConfig:
    """A `SchedulerConfig` whose capacities and budgets come from `profile`.

    `overrides` are further `SchedulerConfig` fields; None values are ignored.
    """
    base = SchedulerConfig(
        policy=policy,
        block_size=block_size,
        num_device_blocks=profile.device_blocks(block_size),
        num_host_blocks=profile.host_blocks(block_size),
        max_batch_tokens=profile.max_batch_tokens,
        max_num_seqs=profile.max_num_seqs,
    )
    return base.with_(**{k: v for k, v in overrides.items() if v is not None})
