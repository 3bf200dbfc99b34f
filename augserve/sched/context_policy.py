"""INFERCEPT's memory waste of each way to hold a context during a call (docs/paper.md section 2).

Memory is in tokens (the KV bytes per token M multiplies every term and does
not change any comparison), time in seconds.
"""

from __future__ import annotations

from augserve.core.config import SchedulerConfig
from augserve.core.latency import LatencyModel
from augserve.core.request import ContextPolicy


def waste(
    policy: ContextPolicy,
    ctx_len: int,
    call_time: float,
    other_tokens: int,
    latency: LatencyModel,
) -> float:
    """Token-seconds of memory wasted by handling a call with `policy`."""
    if policy is ContextPolicy.PRESERVE:
        return call_time * ctx_len
    if policy is ContextPolicy.DISCARD:
        t = latency.prefill_time(ctx_len)
        return t * ctx_len + t * other_tokens
    return swap_waste(ctx_len, latency)


def swap_waste(ctx_len: int, latency: LatencyModel) -> float:
    """Waste_S = 2 tau_swap(L) N_fwd_max."""
    return 2.0 * latency.swap_time(ctx_len) * latency.swap_tokens_per_iter()


def choose_from_terms(
    ctx_len: int,
    call_time: float,
    other_tokens: int,
    t_fwd: float,
    waste_swap: float | None,
) -> ContextPolicy:
    """argmin of the waste from its precomputed parts: t_fwd = tau_fwd(L), waste_swap =
    Waste_S (None: no host memory). Ties go to Preserve, then Discard."""
    best, low = ContextPolicy.PRESERVE, call_time * ctx_len
    discard = t_fwd * ctx_len + t_fwd * other_tokens
    if discard < low:
        best, low = ContextPolicy.DISCARD, discard
    if waste_swap is not None and waste_swap < low:
        best = ContextPolicy.SWAP
    return best


def choose_context_policy(
    ctx_len: int,
    call_time: float,
    other_tokens: int,
    latency: LatencyModel,
    allow_swap: bool,
) -> ContextPolicy:
    """argmin of the waste; ties go to Preserve, then Discard."""
    return choose_from_terms(
        ctx_len,
        call_time,
        other_tokens,
        latency.prefill_time(ctx_len),
        swap_waste(ctx_len, latency) if allow_swap else None,
    )


def min_waste_policy(
    config: SchedulerConfig,
    latency: LatencyModel,
    ctx_len: int,
    call_time: float,
    other_tokens: int,
) -> ContextPolicy:
    """The one min-waste choice at a call (the scheduler's at a call start, a planning
    policy's for a predicted call): the config's forced policy, else the argmin of the
    waste, Swap allowed where the config has host memory."""
    if config.forced_context_policy is not None:
        return config.forced_context_policy
    allow_swap = config.num_host_blocks > 0
    return choose_context_policy(ctx_len, call_time, other_tokens, latency, allow_swap)
