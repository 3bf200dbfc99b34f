"""AugServe's space-time cost terms and value density (docs/paper.md section 3).

A segment's cost is the integral of its memory over its residency: tokens of
KV times seconds. Every term takes the latency model that the simulator and
the engine share.
"""

from __future__ import annotations

from augserve.core.latency import LatencyModel
from augserve.core.request import ContextPolicy


def prefill_cost(num_tokens: int, latency: LatencyModel) -> float:
    """C^prefill(L) = L * tau_fwd(L)."""
    return num_tokens * latency.prefill_time(num_tokens)


def decode_cost(ctx_start: float, num_out: float, tau_iter: float) -> float:
    """C^decode: the context grows from ctx_start by one token per iteration for num_out."""
    return tau_iter * (num_out * ctx_start + num_out * (num_out + 1) / 2.0)


def call_cost(
    policy: ContextPolicy, ctx_len: int, call_time: float, latency: LatencyModel
) -> float:
    """C^call(p): Preserve holds the context for the call; Swap moves it out; Discard is free."""
    if policy is ContextPolicy.PRESERVE:
        return ctx_len * call_time
    if policy is ContextPolicy.SWAP:
        return ctx_len * latency.swap_time(ctx_len)
    return 0.0


def return_cost(ctx_len: int, num_returned: int, latency: LatencyModel) -> float:
    """C^return(L, r) = (L + r) * tau_fwd(r): prefill of the call's returned tokens."""
    return (ctx_len + num_returned) * latency.prefill_time(num_returned)


def resume_cost(policy: ContextPolicy, ctx_len: int, latency: LatencyModel) -> float:
    """Resumption after the call: recompute (Discard), swap-in (Swap) or nothing."""
    if policy is ContextPolicy.DISCARD:
        return ctx_len * latency.prefill_time(ctx_len)
    if policy is ContextPolicy.SWAP:
        return ctx_len * latency.swap_time(ctx_len)
    return 0.0


def scheduling_value(waited_s: float, beta: float) -> float:
    """V = 1 + beta * w: w in milliseconds since the request was last scheduled, beta
    per millisecond (docs/paper.md's DECISION)."""
    return 1.0 + beta * 1000.0 * waited_s


def value_density(value: float, cost: float) -> float:
    """theta = V / C: value per unit of space-time cost; higher runs first."""
    return value / cost
