"""INFERCEPT's memory waste of each way to hold a context during a call (PAPER.md section 2).

Memory is in tokens (the KV bytes per token M multiplies every term and does
not change any comparison), time in seconds.
"""

from __future__ import annotations

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
    return 2.0 * latency.swap_time(ctx_len) * latency.swap_tokens_per_iter()


def choose_context_policy(
    ctx_len: int,
    call_time: float,
    other_tokens: int,
    latency: LatencyModel,
    allow_swap: bool,
) -> ContextPolicy:
    """argmin of the waste; ties go to Preserve, then Discard."""
    candidates = [ContextPolicy.PRESERVE, ContextPolicy.DISCARD]
    if allow_swap:
        candidates.append(ContextPolicy.SWAP)
    return min(candidates, key=lambda p: waste(p, ctx_len, call_time, other_tokens, latency))
