"""Greedy batch packing under a token budget and KV memory (PAPER.md section 3, step 4).

Requests are offered the batch in the policy's order. Each takes its tokens
for this iteration (1 to decode, a chunk of its prefill / recompute / returned
tokens otherwise) if they fit the remaining budget and its KV blocks can be
had. Memory comes, in order, from free blocks, then from paused requests whose
policy is Swap or Discard (lazy eviction, latest expected return first). A
request that already holds KV and cannot grow may also displace preserved
paused requests (swap, else discard) and preempt lower-ranked runnable
requests (discard and recompute, as vLLM does). The scan goes on past a
request that does not fit.

With chunked prefill a request that does not fit whole takes a partial
chunk, so the token-budget knapsack is fractional and the greedy order is
already optimal: Appendix E's comparison with the best single request can
never change the batch, and is not repeated here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from augserve.core.request import Request
from augserve.sched.output import ScheduledChunk

if TYPE_CHECKING:
    from augserve.sched.scheduler import Scheduler


def _expected_return(req: Request) -> float:
    return req.calls[-1].start + (req.pred_call_time or 0.0)


class _Packer:
    def __init__(self, sched: Scheduler, order: Sequence[Request]) -> None:
        self.sched = sched
        self.order = order
        self.scheduled: set[str] = set()
        self.reclaim_exhausted = not sched.reclaimable
        self.block_size = sched.config.block_size

    def run(self, budget: int) -> list[ScheduledChunk]:
        cfg = self.sched.config
        chunks: list[ScheduledChunk] = []
        left = budget
        for idx, req in enumerate(self.order):
            if left <= 0 or len(chunks) >= cfg.max_num_seqs:
                break
            chunk = self.try_schedule(req, idx, left)
            if chunk is None:
                if not cfg.scan_on:
                    break
                continue
            chunks.append(chunk)
            left -= chunk.num_tokens
            self.scheduled.add(req.request_id)
        return chunks

    def try_schedule(self, req: Request, idx: int, left: int) -> ScheduledChunk | None:
        computed = req.num_computed_tokens
        if (
            req.num_tokens - computed == 1
            and not req.host_block_ids
            and computed < len(req.block_ids) * self.block_size
        ):  # decode into a block it already holds: the common case, kept cheap
            return ScheduledChunk(req, 1, computed, True)
        sched, kv, pool = self.sched, self.sched.kv, self.sched.pool
        if (
            not (req.block_ids or req.host_block_ids)
            and not pool.device.num_free
            and self.reclaim_exhausted
        ):
            return None  # holds no KV and no memory can be had for it this iteration
        if req.host_block_ids:
            missing = len(req.host_block_ids) - pool.num_free_device
            if missing > 0:  # it holds KV: it may displace and preempt like a running request
                self.make_room(missing, idx, urgent=True)
            if not kv.swap_in(req):
                return None
        n = min(req.num_uncomputed_tokens, left)
        need = kv.blocks_needed(req, n)
        if need > pool.num_free_device:
            urgent = bool(req.block_ids)
            self.make_room(need - pool.num_free_device, idx, urgent)
            if need > pool.num_free_device:
                n = min(n, kv.token_capacity(req, pool.num_free_device))
                if n <= 0:
                    return None
                need = kv.blocks_needed(req, n)
        kv.allocate(req, need)
        return sched.make_chunk(req, n)

    def make_room(self, blocks: int, idx: int, urgent: bool) -> int:
        freed = 0
        if not self.reclaim_exhausted:
            for victim in sorted(
                self.sched.reclaimable.values(), key=_expected_return, reverse=True
            ):
                if freed >= blocks:
                    return freed
                freed += self.sched.evict(victim, blocks - freed, urgent)
            self.reclaim_exhausted = freed < blocks and not urgent
        if freed >= blocks or not urgent:
            return freed
        freed += self._displace_preserved(blocks - freed)
        if freed < blocks:
            freed += self._preempt_lower(blocks - freed, idx)
        return freed

    def _displace_preserved(self, blocks: int) -> int:
        freed = 0
        holders = [r for r in self.sched.paused.values() if r.block_ids]
        for victim in sorted(holders, key=_expected_return, reverse=True):
            if freed >= blocks:
                break
            freed += self.sched.evict(victim, blocks - freed, urgent=True)
        return freed

    def _preempt_lower(self, blocks: int, idx: int) -> int:
        freed = 0
        for victim in reversed(self.order[idx + 1 :]):
            if freed >= blocks:
                break
            if victim.request_id in self.scheduled or not (
                victim.block_ids or victim.host_block_ids
            ):
                continue
            freed += len(victim.block_ids)
            self.sched.preempt(victim)
        return freed


def pack_batch(
    sched: Scheduler, order: Sequence[Request], budget: int, now: float
) -> list[ScheduledChunk]:
    return _Packer(sched, order).run(budget)
