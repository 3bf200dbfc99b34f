"""Continuum (CacheTTL; Li et al., arXiv 2511.02230): KV pinned for a TTL during a tool
call, with program-level FCFS, on vLLM v1 with its prefix cache.

- Order: program-level first-come-first-served. A program (an agent session) keeps
  the arrival of its first turn through every call, so a returning turn goes ahead
  of programs that came later; running requests keep their place, as in vLLM.
- At a call the request's KV is pinned on the device for a time-to-live `ttl`
  (context policy Preserve, which admission cannot take), or, with `ttl` 0, let go
  at once to the prefix cache (Discard: the blocks stay cached free until evicted).
  When the call outlives its TTL the pin expires: the KV becomes reclaimable and
  goes to the prefix cache when memory is needed.
- The TTL trades what a pin saves against what it holds. A call of duration D
  (its tool's empirical distribution, from the durations seen so far; with none
  yet, the predictor's estimate as a point mass) saves, when it returns within
  the TTL, the reload (recompute of the context) and the queueing delay a turn
  sees when it re-enters (running mean of the waits of unpinned returns); it
  costs the share of the KV capacity it holds for min(D, ttl) seconds. The TTL
  maximizes   P(D <= ttl) * (reload + queue_delay) - ctx / capacity * E[min(D, ttl)]
  over the durations seen (0 if no TTL gains).

Where the paper is silent, see docs/scheduler.md ("Policies", `continuum`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from augserve.core.request import ContextPolicy, Request, RequestStatus
from augserve.sched.call_handling import CallHandling, PolicyChooses
from augserve.sched.policies.base import RankingPolicy

HISTORY = 256  # durations kept per tool
_QUEUE_EWMA = 0.2


class ContinuumPolicy(RankingPolicy):
    name = "continuum"
    call_handling: ClassVar[type[CallHandling]] = PolicyChooses

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.capacity = self.config.num_device_blocks * self.config.block_size
        self._durations: dict[str | None, deque[float]] = {}  # tool -> recent call times
        self._expiry: dict[str, float] = {}  # pinned request id -> when its pin expires
        self._unpinned_since: dict[str, float] = {}  # returned unpinned -> return time
        self.queue_delay = 0.0  # running mean of unpinned returns' waits

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        return (req.status is not RequestStatus.RUNNING, req.queue_time, req.request_id)

    # --- the TTL ------------------------------------------------------------------
    def ttl(self, req: Request) -> float:
        """The pin's time-to-live for the call the request just started (0: no pin)."""
        ctx = req.num_tokens
        gain = self.latency.prefill_time(ctx) + self.queue_delay
        rate = ctx / self.capacity  # memory share held per second
        seen = self._durations.get(req.calls[-1].tool)
        if not seen:
            d = req.pred_call_time
            return d if d is not None and gain - rate * d > 0.0 else 0.0
        times = sorted(seen)
        n = len(times)
        best, best_ttl, below = 0.0, 0.0, 0.0  # below: sum of the durations <= ttl
        for i, t in enumerate(times):
            below += t
            held = (below + t * (n - i - 1)) / n  # E[min(D, t)]
            utility = (i + 1) / n * gain - rate * held
            if utility > best:
                best, best_ttl = utility, t
        return best_ttl

    def call_policy(self, req: Request, now: float) -> ContextPolicy:
        ttl = self.ttl(req)
        if ttl <= 0.0:
            return ContextPolicy.DISCARD
        self._expiry[req.request_id] = now + ttl
        return ContextPolicy.PRESERVE

    def replan(self, in_call: Mapping[str, Request], now: float) -> list[Request]:
        """Paused requests whose pin has expired: their KV may go to the prefix cache."""
        expired = [rid for rid, t in self._expiry.items() if t <= now]
        for rid in expired:
            del self._expiry[rid]
        return [in_call[rid] for rid in expired if rid in in_call]

    # --- hooks --------------------------------------------------------------------
    def on_return(self, req: Request, applied: ContextPolicy, now: float) -> None:
        call = req.calls[-1]
        if call.end is not None:
            seen = self._durations.setdefault(call.tool, deque(maxlen=HISTORY))
            seen.append(call.end - call.start)
        self._expiry.pop(req.request_id, None)
        if applied is not ContextPolicy.PRESERVE:
            self._unpinned_since[req.request_id] = now

    def after_schedule(
        self, candidates: Sequence[Request], scheduled: set[str], now: float
    ) -> None:
        waiting = self._unpinned_since
        if not waiting:
            return
        for rid in [r for r in waiting if r in scheduled]:
            wait = now - waiting.pop(rid)
            self.queue_delay += _QUEUE_EWMA * (wait - self.queue_delay)

    def forget(self, request_id: str) -> None:
        self._expiry.pop(request_id, None)
        self._unpinned_since.pop(request_id, None)
