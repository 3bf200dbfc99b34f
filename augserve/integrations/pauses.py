"""The context policy of a resumable streaming session's pause when nothing forces it
(`PolicyBridge.stream_paused`, docs/vllm-plugin.md "Context policies"), and of the call
after a client session's turn (`session_hold`): the policy's own
choice where it owns one, else the min-waste choice between Preserve and Discard
(docs/paper.md, Appendix B; no per-request Swap in the engine)."""

from __future__ import annotations

from augserve.core.latency import LatencyModel
from augserve.core.request import CallRecord, ContextPolicy, Request
from augserve.sched.call_handling import DiscardAtCall, PolicyChooses
from augserve.sched.context_policy import choose_context_policy
from augserve.sched.policies import RankingPolicy


def unforced_pause_policy(
    policy: RankingPolicy,
    mirror: Request,
    now: float,
    running_tokens: int,
    latency: LatencyModel,
) -> ContextPolicy:
    """`PolicyChooses`' choice (a Swap taken as Discard), else the argmin of the waste."""
    if policy.call_handling is PolicyChooses:
        chosen = policy.call_policy(mirror, now)
        return ContextPolicy.DISCARD if chosen is ContextPolicy.SWAP else chosen
    other = max(0, running_tokens - mirror.num_computed_tokens)
    call = mirror.pred_call_time or 0.0
    return choose_context_policy(mirror.num_tokens, call, other, latency, False)


def session_hold(
    policy: RankingPolicy,
    mirror: Request,
    now: float,
    running_tokens: int,
    latency: LatencyModel,
) -> ContextPolicy | None:
    """At the end of a session's turn (`holds.py`): None where no call is predicted after
    it or the policy discards at every call (vLLM's, SSJF's: the engine frees the turn
    into its prefix cache, as vLLM does); else the choice `unforced_pause_policy` makes
    for that call (Preserve: hold the turn's KV through it)."""
    if policy.call_handling is DiscardAtCall or mirror.pred_call_time is None:
        return None
    mirror.calls.append(CallRecord(start=now))  # the call a choosing policy reads
    try:
        return unforced_pause_policy(policy, mirror, now, running_tokens, latency)
    finally:
        mirror.calls.pop()
