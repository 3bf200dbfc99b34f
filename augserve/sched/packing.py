"""Greedy batch packing under a token budget and KV memory (docs/paper.md section 3, step 4).

Requests are offered the batch in the policy's order. Each takes its tokens
for this iteration (1 to decode, a chunk of its prefill / recompute / returned
tokens otherwise) if they fit the remaining budget and its KV blocks can be
had. Memory comes from the `KVCacheManager`: free blocks, then paused requests
whose policy is Swap or Discard (lazy eviction, latest expected return
first). A request that already holds KV and cannot grow may also displace
preserved paused requests (swap, else discard) and preempt runnable requests
it outranks that are not in this batch, lowest-ranked first (discard and
recompute, as vLLM does). The scan goes on past a request that does not fit.
A policy may also gate admission (`admission.py`: memory kept for the growth
of the requests already holding KV); once the gate refuses a request, no
request without KV is admitted for the rest of the iteration.

Requests that hold KV (running, resumable) are bounded by memory and fully
sorted; those that hold none (waiting) can be many under overload, so they
are ranked lazily and passed over while memory is exhausted (no request
without KV could be admitted then). They come either from the policy's
persistent queue (`queue`, see `ranking.py`: the scheduler's default), read
in key order without being popped, or, without a queue, from a heap keyed
afresh from `candidates` each iteration. The order offered is exactly the
policy's sort order either way.

With chunked prefill a request that does not fit whole takes a partial
chunk, so the token-budget knapsack is fractional and the greedy order is
already optimal: Appendix E's comparison with the best single request can
never change the batch, and is not repeated here.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from operator import itemgetter
from typing import Any

from augserve.core.config import SchedulerConfig
from augserve.core.request import Request
from augserve.sched.admission import GrowthGate, KVGateMemory
from augserve.sched.kv_manager import KVCacheManager
from augserve.sched.output import ScheduledChunk
from augserve.sched.policies.base import RankingPolicy
from augserve.sched.progress import Protection, growth_blocks
from augserve.sched.ranking import QueueScan, RankQueue

Keyed = tuple[tuple[Any, ...], Request]


class Packer:
    """One iteration's greedy packing (built fresh by each `schedule()`).

    With a `queue`, `candidates` are the runnable requests that hold KV and the
    queue holds the others; afterwards `admitted` lists the queued requests that
    got KV and `preempted` the candidates that lost theirs.
    """

    def __init__(
        self,
        kv: KVCacheManager,
        policy: RankingPolicy,
        config: SchedulerConfig,
        candidates: Sequence[Request],
        now: float,
        *,
        queue: RankQueue | None = None,
        protection: Protection | None = None,
    ) -> None:
        self.kv = kv
        self.pool = kv.pool
        self.policy = policy
        self.config = config
        self.now = now
        key = policy.key
        self.protection = protection or Protection(None, policy.preempt_key)
        self.first: list[Request] = []  # protected requests, offered first in their order
        self.held: list[Keyed] = []  # requests holding KV, fully sorted
        self.no_kv: list[Request] = []  # requests holding none: ranked only if memory allows
        for r in candidates:
            if r.protected is not None:
                self.first.append(r)
            elif r.block_ids or r.host_block_ids:
                self.held.append((key(r, now), r))
            else:
                self.no_kv.append(r)
        self.held.sort(key=itemgetter(0))
        self.first.sort(key=lambda r: r.protected or 0)  # the order they were protected in
        self._heap: list[Keyed] | None = None
        self.queue = queue
        self._scan: QueueScan | None = None
        # preemption victims come from here, the last first: the lowest-ranked holders,
        # then the protected ones that hold KV, the last protected first
        self.holders = [r for r in self.first if r.block_ids or r.host_block_ids]
        self.holders += [r for _, r in self.held]
        for r in self.holders:
            if r.kv_order is None:  # a session's KV handed over at its arrival
                self.protection.got_kv(r)
        self.next_holder = 0
        self.last_key: tuple[Any, ...] | None = None
        self.scheduled: set[str] = set()
        self.admitted: list[Request] = []  # from the queue, now holding KV
        self.preempted: list[Request] = []  # candidates whose KV was taken
        self.reclaim_exhausted = not kv.has_reclaimable
        self.block_size = config.block_size
        frac = policy.admission_growth()
        self.gate = GrowthGate(frac, KVGateMemory(kv), self.holders) if frac is not None else None
        # growth first (`progress.py`): the holders cannot all grow from free + reclaimable
        self.short = (
            config.growth_first
            and self.protection.engaged
            and (
                growth_blocks(self.holders, self.block_size)
                > self.pool.num_free_device + kv.reclaimable_blocks()
            )
        )

    def _waiting_top(self) -> Keyed | None:
        """The best request without KV not yet offered (dropping those ranked before
        the last offered request: they were passed over while memory was gone)."""
        last = self.last_key
        if self.queue is not None:
            if self._scan is None:
                self._scan = self.queue.scan(self.now)
            scan = self._scan
            if last is not None:
                scan.skip_below(last)
            return scan.peek()
        heap = self.waiting_heap()
        while heap and last is not None and heap[0][0] < last:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _pop_waiting(self) -> None:
        if self._scan is not None:
            self._scan.pop()
        else:
            heapq.heappop(self.waiting_heap())

    def waiting_heap(self) -> list[Keyed]:
        """Requests without KV in a heap, keyed when first needed (often never under
        overload: then memory is gone all iteration and thousands of keys are spared)."""
        if self._heap is None:
            key, now = self.policy.key, self.now
            self._heap = [(key(r, now), r) for r in self.no_kv]
            heapq.heapify(self._heap)  # keys are unique: they end with the request id
        return self._heap

    def run(self, budget: int) -> list[ScheduledChunk]:
        """Offer requests until the budget, the batch size or the requests run out
        (`progress.py`): the protected holders, then (growth first, when memory is
        short) every other holder, then the protected requests without KV (from free
        and reclaimable memory only), then the holders and the waiting requests merged
        in policy order."""
        chunks: list[ScheduledChunk] = []
        left = budget
        first = self.first
        for req in first:
            if req.block_ids or req.host_block_ids:
                left = self._take(req, left, chunks, queued=False)
        if self.short:
            for _, req in self.held:
                left = self._take(req, left, chunks, queued=False)
            self.next_holder = len(self.held)
        for req in first:
            if req.request_id not in self.scheduled and not (req.block_ids or req.host_block_ids):
                left = self._take(req, left, chunks, queued=False)
        return self._merge(left, chunks)

    def _take(self, req: Request, left: int, chunks: list[ScheduledChunk], queued: bool) -> int:
        """Offer the batch to one request; the budget left after it."""
        if left <= 0 or len(chunks) >= self.config.max_num_seqs:
            return left
        chunk = self.try_schedule(req, left)
        if chunk is None:
            return left
        chunks.append(chunk)
        self.scheduled.add(req.request_id)
        if queued and self.queue is not None:
            self.admitted.append(req)
        return left - chunk.num_tokens

    def _merge(self, left: int, chunks: list[ScheduledChunk]) -> list[ScheduledChunk]:
        """The holders not yet offered and the waiting requests, in policy order."""
        cfg = self.config
        max_seqs, scan_on, bs = cfg.max_num_seqs, cfg.scan_on, self.block_size
        held, device, gate = self.held, self.pool.device, self.gate
        top: Keyed | None = None
        top_fresh = False  # `top` is the waiting top for the current last_key
        while left > 0 and len(chunks) < max_seqs:
            if (not device.num_free and self.reclaim_exhausted) or (gate and gate.closed):
                top, top_fresh = None, False  # no admission possible: pass the waiting over
            elif not top_fresh:
                top, top_fresh = self._waiting_top(), True
            i = self.next_holder
            if i < len(held) and (top is None or held[i][0] < top[0]):
                key, req = held[i]
                self.next_holder = i + 1
                queued = False
            elif top is None:
                break
            else:
                key, req = top
                self._pop_waiting()
                top_fresh, queued = False, True
            self.last_key = key
            computed = req.num_computed_tokens
            if (
                req.num_tokens - computed == 1
                and not req.host_block_ids
                and computed < len(req.block_ids) * bs
            ):  # decode into a block it already holds (as in `try_schedule`)
                chunk: ScheduledChunk | None = ScheduledChunk(req, 1, computed, True, req.block_ids)
            else:
                chunk = self.try_schedule(req, left)
            if chunk is None:
                if not scan_on:
                    break
                continue
            chunks.append(chunk)
            left -= chunk.num_tokens
            self.scheduled.add(req.request_id)
            if queued and self.queue is not None:
                self.admitted.append(req)
        return chunks

    def try_schedule(self, req: Request, left: int) -> ScheduledChunk | None:
        computed = req.num_computed_tokens
        if (
            req.num_tokens - computed == 1
            and not req.host_block_ids
            and computed < len(req.block_ids) * self.block_size
        ):  # decode into a block it already holds: the common case, kept cheap
            return ScheduledChunk(req, 1, computed, True, req.block_ids)
        kv, pool = self.kv, self.pool
        admitting = not (req.block_ids or req.host_block_ids)
        if admitting and (
            (not pool.device.num_free and self.reclaim_exhausted)
            or (req.protected is None and self.gate is not None and not self.gate.admits(req))
        ):
            return None  # holds no KV and may not get any this iteration
        if req.host_block_ids:
            missing = len(req.host_block_ids) - pool.num_free_device
            if missing > 0:  # it holds KV: it may displace and preempt like a running request
                self.make_room(missing, req)
            if not kv.swap_in(req):
                return None
        holder = req if req.block_ids else None  # holds KV: may displace and preempt
        hit = kv.get_computed_blocks(req) if admitting else 0
        n = min(req.num_uncomputed_tokens, left)
        need = kv.blocks_needed(req, n)
        if not kv.can_allocate(need):
            self.make_room(need - pool.num_free_device, holder)
            if not kv.can_allocate(need):
                n = min(n, kv.token_capacity(req, pool.num_free_device))
                if n <= 0:
                    if hit:
                        kv.undo_hit(req)  # not admitted: its hit goes back to the cache
                    return None
                need = kv.blocks_needed(req, n)
        kv.allocate_slots(req, need)
        if admitting:
            kv.count_hit(req, hit)
            self.protection.got_kv(req)
            if self.gate is not None:
                self.gate.admitted(req)
        start = req.num_computed_tokens
        return ScheduledChunk(req, n, start, start + n == req.num_tokens, req.block_ids)

    def make_room(self, blocks: int, holder: Request | None) -> int:
        """Free `blocks` device blocks; a KV `holder` that must grow may take more."""
        urgent = holder is not None
        freed = 0
        if not self.reclaim_exhausted:
            freed = self.kv.reclaim(blocks, urgent)
            self.reclaim_exhausted = freed < blocks and not urgent
        if freed >= blocks or not urgent:
            return freed
        freed += self.kv.displace_preserved(blocks - freed)
        if freed < blocks:
            freed += self._preempt_lower(blocks - freed, holder)
        return freed

    def _preempt_lower(self, blocks: int, holder: Request | None) -> int:
        """Preempt unscheduled KV holders that `holder` outranks in the order of taking
        KV (`progress.py` rule 2: protected requests first, then the policy's
        `preempt_key`, which does not age), lowest-ranked first."""
        if holder is None:
            return 0
        freed = 0
        protection = self.protection
        rank = protection.order
        mine = rank(holder)
        victims: list[Request] = self.holders[::-1]  # the lowest-ranked first
        if protection.by_arrival_of_kv:
            victims.sort(key=rank, reverse=True)  # the last to get KV first (rule 3)
        for victim in victims:
            if freed >= blocks:
                break
            if victim.request_id in self.scheduled or rank(victim) <= mine:
                continue
            if victim.block_ids or victim.host_block_ids:
                freed += self.kv.preempt(victim)
                self.preempted.append(victim)
                protection.preempted(victim)
        return freed
