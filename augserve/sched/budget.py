"""AugServe's dynamic batch token budget (docs/paper.md section 4); static policies use T_max."""

from __future__ import annotations

import math

from augserve.core.config import SchedulerConfig


def token_budget(config: SchedulerConfig, dynamic: bool, free: int, reclaimable: int) -> int:
    """The iteration's token budget: T_max, or with `dynamic` the budget that follows
    the free and reclaimable device blocks."""
    if not dynamic:
        return config.max_batch_tokens
    c = config
    return dynamic_token_budget(
        free, reclaimable, c.block_size, c.max_batch_tokens, c.beta_low, c.beta_high
    )


def dynamic_token_budget(
    free_blocks: int,
    reclaimable_blocks: int,
    block_size: int,
    max_batch_tokens: int,
    beta_low: float,
    beta_high: float,
    tokens_per_unit: float = 1.0,
) -> int:
    """B = floor((G_free + G_reclaimable) / mu), clipped to [beta_low, beta_high] x T_max.

    Memory is counted in tokens (blocks x block_size), so mu is 1 token by default.
    """
    raw = math.floor((free_blocks + reclaimable_blocks) * block_size / tokens_per_unit)
    low = max(1, math.floor(beta_low * max_batch_tokens))
    high = max(low, math.floor(beta_high * max_batch_tokens))
    return min(max(raw, low), high)
