"""The one KV cache manager the scheduler talks to (docs/design.md; docs/paper.md section 2).

`KVCacheManager` owns the block pool (`core/block_pool.py`), the prefix cache
(`prefix_cache.py`) and the host swap space, and keeps which paused requests
hold device KV. Its verbs are vLLM v1's where vLLM has one:

- sizes: `blocks_needed`, `token_capacity`, `can_allocate`, `can_swap_out`;
- moves: `allocate_slots`, `free`, `discard`, `swap_out`, `swap_in`;
- the prefix cache: `peek_computed_tokens`, `get_computed_blocks`, `undo_hit`,
  `count_hit`, `cache_blocks`;
- a request's call: `pause`, `replan`, `release`, and for client sessions `hand_over`
  (a continuation takes the paused turn's KV);
- taking memory when the packer needs blocks, in this order: `reclaim` (paused
  requests whose planned policy is Swap or Discard but whose KV is still on
  device, as INFERCEPT's lazy eviction keeps it: the *reclaimable* set, latest
  expected return first; swap within the iteration's swap budget, else discard),
  `displace_preserved` (only for a request that holds KV and must grow: preserved
  paused requests, latest return first) and `preempt` (a runnable request the
  packer outranks: discard and recompute, as vLLM does).

A request's context lives in `block_ids` (a device prefix) followed by
`host_block_ids` (a host suffix). Swap-out moves whole blocks from the back of
the device part to the front of the host part; swap-in moves them back in order.
Every move made while `schedule()` runs is recorded in the iteration's
`SchedulerOutput` (between `begin` and `end`) so the executor can copy the
tensors; a discard outside it (vLLM's at a call start) is reported in the
`SchedulerUpdate` instead. With the prefix cache a device block may be shared:
freeing drops one reference, and a full computed block outlives its request as
cached free memory.
"""

from __future__ import annotations

from augserve.core.block_pool import BlockPool
from augserve.core.config import SchedulerConfig
from augserve.core.latency import LatencyModel
from augserve.core.request import ContextPolicy, Request, RequestStatus
from augserve.sched.output import SchedulerOutput
from augserve.sched.prefix_cache import PrefixCache

_EVICTABLE = (ContextPolicy.SWAP, ContextPolicy.DISCARD)


def swap_budget(config: SchedulerConfig, latency: LatencyModel) -> int:
    """Blocks swapped each way per iteration: the config's, else the tokens the host
    link moves in one decode iteration."""
    if config.swap_budget_blocks is not None:
        return config.swap_budget_blocks
    return max(1, latency.swap_tokens_per_iter() // config.block_size)


def expected_return(req: Request) -> float:
    """When the request's open call is predicted to come back."""
    return req.calls[-1].start + (req.pred_call_time or 0.0)


class KVCacheManager:
    def __init__(
        self, pool: BlockPool, swap_budget_blocks: int, prefix_caching: bool = False
    ) -> None:
        self.pool = pool
        self.prefix = PrefixCache(pool) if prefix_caching else None
        self.swap_budget_blocks = swap_budget_blocks
        self._out: SchedulerOutput | None = None
        self._swap_out_left = swap_budget_blocks
        self._swap_in_left = swap_budget_blocks
        self.reclaimable: dict[str, Request] = {}  # paused, Swap/Discard planned, KV on device
        self.in_call: dict[str, Request] = {}  # paused requests holding device blocks
        self.soft: set[str] = set()  # paused client sessions: reclaimable whatever their policy
        # KV taken under pressure, for /metrics: "recompute" (a runnable request
        # preempted) and "displace" (a preserved paused request evicted), and the
        # computed tokens those takings threw away (to be computed again)
        self.preemptions = {"recompute": 0, "displace": 0}
        self.recomputed_tokens = 0

    @classmethod
    def for_config(
        cls, config: SchedulerConfig, latency: LatencyModel, prefix_caching: bool
    ) -> KVCacheManager:
        pool = BlockPool(config.num_device_blocks, config.num_host_blocks, config.block_size)
        return cls(pool, swap_budget(config, latency), prefix_caching)

    def begin(self, out: SchedulerOutput) -> None:
        """Start an iteration: moves go to `out`, swap budgets refill."""
        self._out = out
        self._swap_out_left = self.swap_budget_blocks
        self._swap_in_left = self.swap_budget_blocks

    def end(self) -> None:
        """The iteration's decision is made: later moves are not part of it."""
        self._out = None

    # --- sizes -------------------------------------------------------------------
    def blocks_needed(self, req: Request, num_new_tokens: int) -> int:
        held = len(req.block_ids) + len(req.host_block_ids)
        return max(0, self.pool.blocks_for(req.num_computed_tokens + num_new_tokens) - held)

    def token_capacity(self, req: Request, extra_blocks: int) -> int:
        """New tokens the request can compute with `extra_blocks` more device blocks."""
        slots = (len(req.block_ids) + extra_blocks) * self.pool.block_size
        return slots - req.num_computed_tokens

    def can_allocate(self, num_blocks: int) -> bool:
        return num_blocks <= self.pool.num_free_device

    def can_swap_out(self) -> bool:
        return self._swap_out_left > 0 and self.pool.num_free_host > 0

    def reclaimable_blocks(self) -> int:
        return sum(len(r.block_ids) for r in self.reclaimable.values())

    @property
    def has_reclaimable(self) -> bool:
        return bool(self.reclaimable)

    # --- moves -------------------------------------------------------------------
    def allocate_slots(self, req: Request, num_blocks: int) -> None:
        req.block_ids.extend(self.pool.device.allocate(num_blocks))

    def _free_blocks(self, req: Request) -> None:
        self.pool.device.free(req.block_ids)
        self.pool.host.free(req.host_block_ids)
        req.block_ids = []
        req.host_block_ids = []
        req.num_hashed_blocks = 0

    def free(self, req: Request) -> None:
        """Give back every block of a request that is done."""
        self._free_blocks(req)
        self.release(req)

    def discard(self, req: Request) -> int:
        """Drop the request's KV entirely; it recomputes later. Returns device blocks freed."""
        freed = len(req.block_ids)
        self._free_blocks(req)
        req.num_computed_tokens = 0
        if self._out is not None:
            self._out.discarded.append(req.request_id)
        return freed

    def swap_out(self, req: Request, max_blocks: int) -> int:
        """Move up to `max_blocks` blocks from the back of the device part to the host."""
        n = min(max_blocks, len(req.block_ids), self._swap_out_left, self.pool.num_free_host)
        if n <= 0:
            return 0
        host = self.pool.host.allocate(n)
        device = req.block_ids[-n:]
        del req.block_ids[-n:]
        req.num_hashed_blocks = min(req.num_hashed_blocks, len(req.block_ids))
        assert self._out is not None, "swaps happen only inside schedule()"
        self._out.swap_out.extend(zip(device, host, strict=True))
        req.host_block_ids[:0] = host
        self.pool.device.free(device)
        self._swap_out_left -= n
        return n

    def swap_in(self, req: Request) -> bool:
        """Bring host blocks back in order, within budget and free memory. True when done."""
        n = min(len(req.host_block_ids), self._swap_in_left, self.pool.num_free_device)
        if n > 0:
            device = self.pool.device.allocate(n)
            host = req.host_block_ids[:n]
            del req.host_block_ids[:n]
            assert self._out is not None, "swaps happen only inside schedule()"
            self._out.swap_in.extend(zip(host, device, strict=True))
            req.block_ids.extend(device)
            self.pool.host.free(host)
            self._swap_in_left -= n
        return not req.host_block_ids

    # --- the prefix cache -----------------------------------------------------------
    def peek_computed_tokens(self, req: Request) -> int:
        """What of a request without KV the prefix cache holds now (nothing is taken)."""
        if self.prefix is not None and not (req.block_ids or req.host_block_ids):
            return self.prefix.peek_tokens(req)
        return 0

    def get_computed_blocks(self, req: Request) -> int:
        """Give a request without KV its cached prefix; returns the tokens hit."""
        return self.prefix.take_hit(req) if self.prefix is not None else 0

    def undo_hit(self, req: Request) -> None:
        """The request was not admitted after all: its hit goes back to the cache."""
        self._free_blocks(req)
        req.num_computed_tokens = 0

    def count_hit(self, req: Request, hit_tokens: int) -> None:
        """The request was admitted with `hit_tokens` of its context cached (the stats)."""
        if self.prefix is not None:
            self.prefix.count(req, hit_tokens)

    def cache_blocks(self, req: Request) -> None:
        """Register the request's full computed device blocks: later requests may hit."""
        if self.prefix is not None:
            self.prefix.cache_computed(req)

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
            self.discard(req)
            req.status = RequestStatus.PAUSED_DISCARDED
            return
        req.status = RequestStatus.PAUSED_PRESERVED
        if req.block_ids:
            self.in_call[req.request_id] = req
            if policy in _EVICTABLE or soft:
                self.reclaimable[req.request_id] = req

    def replan(self, req: Request, policy: ContextPolicy) -> None:
        """A paused request holding device KV changes its planned policy."""
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

    def hand_over(self, old: Request, new: Request) -> None:
        """Move `old`'s KV (device prefix, host suffix) to `new`, whose prompt extends
        it (`sessions.extends`); `new` then computes only its tokens after old's."""
        n = old.num_computed_tokens
        full = n // self.pool.block_size
        new.block_ids, old.block_ids = old.block_ids, []
        new.host_block_ids, old.host_block_ids = old.host_block_ids, []
        new.num_computed_tokens, old.num_computed_tokens = n, 0
        new.num_hashed_blocks, old.num_hashed_blocks = old.num_hashed_blocks, 0
        new.block_hashes = old.block_hashes[:full]  # hashes past the computed prefix may differ
        new.num_cached_prompt_tokens = n  # reused KV: the usage's cached tokens

    # --- taking memory ---------------------------------------------------------------
    def evict(self, req: Request, blocks: int, urgent: bool) -> int:
        """Free device blocks of a paused request by its policy. Returns blocks freed.

        Swap moves blocks from the back within the swap budget; with no host space it
        falls back to discard. When `urgent` (a running request cannot grow), a swap
        that the budget blocks becomes a discard.
        """
        wants_swap = req.context_policy is not ContextPolicy.DISCARD and self.pool.num_host_blocks
        if wants_swap and self.can_swap_out():
            freed = self.swap_out(req, blocks)
            req.status = RequestStatus.PAUSED_SWAPPED
            if not req.block_ids:
                self.release(req)
            return freed
        if wants_swap and not urgent and self.pool.num_free_host > 0:
            return 0  # swap budget spent for this iteration: try again next one
        freed = self.discard(req)
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
        freed = self.discard(req)
        req.status = RequestStatus.WAITING
        return freed
