"""Device memory decisions on top of `KVManager` (docs/paper.md section 2).

The memory manager knows which paused requests hold device KV and which of
them may give it up (the *reclaimable* set: paused requests whose planned
policy is Swap or Discard but whose KV is still on device, as INFERCEPT's
lazy eviction keeps it). When the packer needs blocks it asks, in order:

1. `reclaim`: evict reclaimable requests by their policy, latest expected
   return first (swap within the iteration's swap budget, else discard);
2. `displace_preserved`: only for a request that already holds KV and must
   grow: swap (else discard) preserved paused requests, latest return first;
3. `preempt`: the packer preempts unscheduled runnable requests it outranks
   (discard and recompute, as vLLM does).
"""

from __future__ import annotations

from augserve.core.request import ContextPolicy, Request, RequestStatus
from augserve.sched.kv_manager import KVManager

_EVICTABLE = (ContextPolicy.SWAP, ContextPolicy.DISCARD)


def expected_return(req: Request) -> float:
    """When the request's open call is predicted to come back."""
    return req.calls[-1].start + (req.pred_call_time or 0.0)


class MemoryManager:
    def __init__(self, kv: KVManager) -> None:
        self.kv = kv
        self.pool = kv.pool
        self.reclaimable: dict[str, Request] = {}  # paused, Swap/Discard planned, KV on device
        self.in_call: dict[str, Request] = {}  # paused requests holding device blocks
        # paused client sessions (`sessions.py`): reclaimable whatever their policy
        self.soft: set[str] = set()
        # KV taken under pressure, for /metrics: "recompute" (a runnable request
        # preempted) and "displace" (a preserved paused request evicted), and the
        # computed tokens those takings threw away (to be computed again)
        self.preemptions = {"recompute": 0, "displace": 0}
        self.recomputed_tokens = 0

    # --- queries -----------------------------------------------------------------
    def reclaimable_blocks(self) -> int:
        return sum(len(r.block_ids) for r in self.reclaimable.values())

    @property
    def has_reclaimable(self) -> bool:
        return bool(self.reclaimable)

    # --- a request's call ------------------------------------------------------------
    def pause(
        self, req: Request, policy: ContextPolicy, discard_now: bool, soft: bool = False
    ) -> None:
        """The request started a call with planned `policy`. `discard_now`: free its
        KV at once (vLLM) instead of lazily. `soft` (a client session): its device KV
        stays reclaimable whatever the policy (evicted by it: swap, else discard)."""
        req.context_policy = policy
        if soft:
            self.soft.add(req.request_id)
        if discard_now:
            self.kv.discard(req)
            req.status = RequestStatus.PAUSED_DISCARDED
            return
        req.status = RequestStatus.PAUSED_PRESERVED
        if req.block_ids:
            self.in_call[req.request_id] = req
            if policy in _EVICTABLE or soft:
                self.reclaimable[req.request_id] = req

    def replan(self, req: Request, policy: ContextPolicy) -> None:
        """A paused request holding device KV changes its planned policy (INFERCEPT
        re-evaluates it every iteration with the call's remaining time)."""
        req.context_policy = policy
        if policy in _EVICTABLE or req.request_id in self.soft:
            self.reclaimable[req.request_id] = req
        else:
            self.reclaimable.pop(req.request_id, None)

    def release(self, req: Request) -> None:
        """The request left its call (returned, finished or aborted)."""
        self.in_call.pop(req.request_id, None)
        self.reclaimable.pop(req.request_id, None)
        self.soft.discard(req.request_id)

    def free(self, req: Request) -> None:
        """Give back every block of a request that is done."""
        self.kv.free_all(req)
        self.release(req)

    # --- taking memory ---------------------------------------------------------------
    def evict(self, req: Request, blocks: int, urgent: bool) -> int:
        """Free device blocks of a paused request by its policy. Returns blocks freed.

        Swap moves blocks from the back within the swap budget; with no host
        space it falls back to discard. When `urgent` (a running request cannot
        grow), a swap that the budget blocks becomes a discard.
        """
        wants_swap = req.context_policy is not ContextPolicy.DISCARD and self.pool.num_host_blocks
        if wants_swap and self.kv.can_swap_out():
            freed = self.kv.swap_out(req, blocks)
            req.status = RequestStatus.PAUSED_SWAPPED
            if not req.block_ids:
                self.release(req)
            return freed
        if wants_swap and not urgent and self.pool.num_free_host > 0:
            return 0  # swap budget spent for this iteration: try again next one
        freed = self.kv.discard(req)
        req.status = RequestStatus.PAUSED_DISCARDED
        self.release(req)
        return freed

    def evict_all_reclaimable(self) -> None:
        """Eager eviction (lazy_eviction=False): apply every planned Swap/Discard now."""
        for req in list(self.reclaimable.values()):
            self.evict(req, len(req.block_ids), urgent=False)

    def reclaim(self, blocks: int, urgent: bool) -> int:
        """Evict reclaimable requests, latest expected return first, until `blocks` freed."""
        freed = 0
        for victim in sorted(self.reclaimable.values(), key=expected_return, reverse=True):
            if freed >= blocks:
                break
            freed += self.evict(victim, blocks - freed, urgent)
        return freed

    def displace_preserved(self, blocks: int) -> int:
        """Swap (else discard) paused requests that keep their KV, latest return first."""
        freed = 0
        for victim in sorted(self.in_call.values(), key=expected_return, reverse=True):
            if freed >= blocks:
                break
            computed = victim.num_computed_tokens
            freed += self.evict(victim, blocks - freed, urgent=True)
            self.preemptions["displace"] += 1
            if victim.status is RequestStatus.PAUSED_DISCARDED:
                self.recomputed_tokens += computed
        return freed

    def preempt(self, req: Request) -> int:
        """Take a runnable request's KV away (vLLM recompute preemption). Returns blocks."""
        self.preemptions["recompute"] += 1
        self.recomputed_tokens += req.num_computed_tokens
        freed = self.kv.discard(req)
        req.status = RequestStatus.WAITING
        return freed
