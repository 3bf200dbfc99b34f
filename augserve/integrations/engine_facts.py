"""What a scheduler plugin knows of its host engine (KV blocks, the static budget), and
the SchedulerConfig our policies run under inside it (`augserve/integrations/bridge.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from augserve.core.config import SchedulerConfig
from augserve.integrations.options import PluginOptions


@dataclass(frozen=True)
class EngineFacts:
    """What the bridge needs to know of the engine: KV blocks and the static budget."""

    block_size: int
    num_blocks: int
    max_batch_tokens: int
    max_num_seqs: int = 256

    def __post_init__(self) -> None:
        for name in ("block_size", "num_blocks", "max_batch_tokens", "max_num_seqs"):
            if getattr(self, name) <= 0:
                raise ValueError(f"EngineFacts.{name} must be > 0, got {getattr(self, name)}")


def plugin_config(options: PluginOptions, facts: EngineFacts) -> SchedulerConfig:
    """The plugin's options over the engine's facts; no host pool (no per-request swap)."""
    return SchedulerConfig(
        policy=options.policy,
        block_size=facts.block_size,
        num_device_blocks=facts.num_blocks,
        num_host_blocks=0,  # no per-request swap in the engine
        max_batch_tokens=facts.max_batch_tokens,
        max_num_seqs=facts.max_num_seqs,
        dynamic_budget=options.dynamic_budget,
        beta=options.beta,
        beta_low=options.beta_low,
        predictor=options.predictor,
        slo_ttft=options.slo_ttft,
        slo_norm_latency=options.slo_norm_latency,
        slo_reserve=options.slo_reserve,
        admit_growth=options.admit_growth,
    )
