"""Waste (INFERCEPT) and space-time cost (AugServe) formulas, PAPER.md sections 2-3.

Memory is in tokens (the KV bytes per token M multiplies every term and does
not change any comparison), time in seconds.
"""

from __future__ import annotations

from augserve.core.cost import CostModel
from augserve.core.request import ContextPolicy


def waste(
    policy: ContextPolicy,
    ctx_len: int,
    call_time: float,
    other_tokens: int,
    cost: CostModel,
) -> float:
    """INFERCEPT's memory waste of handling a call with `policy` (token-seconds)."""
    if policy is ContextPolicy.PRESERVE:
        return call_time * ctx_len
    if policy is ContextPolicy.DISCARD:
        t = cost.prefill_time(ctx_len)
        return t * ctx_len + t * other_tokens
    return 2.0 * cost.swap_time(ctx_len) * cost.swap_tokens_per_iter()


def choose_context_policy(
    ctx_len: int,
    call_time: float,
    other_tokens: int,
    cost: CostModel,
    allow_swap: bool,
) -> ContextPolicy:
    """argmin of the waste; ties go to Preserve, then Discard."""
    candidates = [ContextPolicy.PRESERVE, ContextPolicy.DISCARD]
    if allow_swap:
        candidates.append(ContextPolicy.SWAP)
    return min(candidates, key=lambda p: waste(p, ctx_len, call_time, other_tokens, cost))


def c_prefill(num_tokens: int, cost: CostModel) -> float:
    return num_tokens * cost.prefill_time(num_tokens)


def c_decode(ctx_start: float, num_out: float, tau_iter: float) -> float:
    """The context grows from ctx_start by one token per iteration for num_out iterations."""
    return tau_iter * (num_out * ctx_start + num_out * (num_out + 1) / 2.0)


def c_call(policy: ContextPolicy, ctx_len: int, call_time: float, cost: CostModel) -> float:
    if policy is ContextPolicy.PRESERVE:
        return ctx_len * call_time
    if policy is ContextPolicy.SWAP:
        return ctx_len * cost.swap_time(ctx_len)
    return 0.0


def c_return(ctx_len: int, num_returned: int, cost: CostModel) -> float:
    return (ctx_len + num_returned) * cost.prefill_time(num_returned)


def c_resume(policy: ContextPolicy, ctx_len: int, cost: CostModel) -> float:
    if policy is ContextPolicy.DISCARD:
        return ctx_len * cost.prefill_time(ctx_len)
    if policy is ContextPolicy.SWAP:
        return ctx_len * cost.swap_time(ctx_len)
    return 0.0
