"""Moves of KV blocks the scheduler decides: allocate, free, swap out/in, discard.

A request's context lives in `block_ids` (a device prefix) followed by
`host_block_ids` (a host suffix). Swap-out moves whole blocks from the back of
the device part to the front of the host part; swap-in moves them back in
order. Every move made while `schedule()` runs is recorded in the iteration's
`SchedulerOutput` so the executor can copy the tensors; a discard outside it
(vLLM's at a call start) is reported in the `SchedulerUpdate` instead.

With the prefix cache (`prefix`), a device block may be shared: freeing drops
one reference, and a full computed block outlives its request as cached free
memory (`core/block_pool.py`, `sched/prefix_cache.py`).
"""

from __future__ import annotations

from augserve.core.block_pool import BlockPool
from augserve.core.request import Request
from augserve.sched.output import SchedulerOutput
from augserve.sched.prefix_cache import PrefixCache


class KVManager:
    def __init__(
        self, pool: BlockPool, swap_budget_blocks: int, prefix_caching: bool = False
    ) -> None:
        self.pool = pool
        self.prefix = PrefixCache(pool) if prefix_caching else None
        self.swap_budget_blocks = swap_budget_blocks
        self._out: SchedulerOutput | None = None
        self._swap_out_left = swap_budget_blocks
        self._swap_in_left = swap_budget_blocks

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

    def can_swap_out(self) -> bool:
        return self._swap_out_left > 0 and self.pool.num_free_host > 0

    # --- moves -------------------------------------------------------------------
    def allocate(self, req: Request, num_blocks: int) -> None:
        req.block_ids.extend(self.pool.device.allocate(num_blocks))

    def free_all(self, req: Request) -> None:
        self.pool.device.free(req.block_ids)
        self.pool.host.free(req.host_block_ids)
        req.block_ids = []
        req.host_block_ids = []
        req.num_hashed_blocks = 0

    def discard(self, req: Request) -> int:
        """Drop the request's KV entirely; it recomputes later. Returns device blocks freed."""
        freed = len(req.block_ids)
        self.free_all(req)
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
