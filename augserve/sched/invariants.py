"""Invariants of a scheduler's state, checked by tests after every step (docs/design.md)."""

from __future__ import annotations

from collections.abc import Iterable

from augserve.core.request import Request, RequestStatus
from augserve.sched.output import SchedulerOutput
from augserve.sched.scheduler import Scheduler


class InvariantError(AssertionError):
    pass


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise InvariantError(msg)


def _check_device_blocks(sched: Scheduler, live: list[Request]) -> None:
    """Each device block's reference count is the number of live requests holding it
    (once each); the blocks nobody holds are exactly the free ones; the cache maps
    hashes to blocks that carry them, and only the prefix cache shares blocks."""
    dev = sched.pool.device
    holders = [0] * dev.num_blocks
    for r in live:
        _check(len(set(r.block_ids)) == len(r.block_ids), f"{r.request_id}: a block twice")
        for b in r.block_ids:
            holders[b] += 1
    _check(holders == dev.ref_count, "device reference counts differ from the holders")
    free = dev.free_ids()
    _check(len(free) == len(set(free)), "a device block is free twice")
    unheld = [b for b, n in enumerate(holders) if n == 0]
    _check(sorted(free) == unheld, "device blocks held by nobody are not exactly the free ones")
    for h, b in dev.cached.items():
        _check(dev.block_hash[b] == h, f"cached hash of block {b} does not match")
    _check(
        sum(h is not None for h in dev.block_hash) == len(dev.cached),
        "a block carries a hash the cache does not know",
    )
    _check(
        all(dev.block_hash[b] is not None for b in dev.evictable_ids()),
        "a cached free block has no hash",
    )
    prefix = sched.prefix
    if prefix is None:
        _check(max(holders, default=0) <= 1, "a device block is shared without a prefix cache")
        return
    bs = sched.pool.block_size
    for r in live:
        full = r.num_computed_tokens // bs
        for i, b in enumerate(r.block_ids):
            named = dev.block_hash[b]
            if named is not None:
                _check(i < full, f"{r.request_id}: cached block {b} is not full of its KV")
                _check(
                    named == prefix.block_hash(r, i),
                    f"{r.request_id}: block {b} holds other tokens",
                )


def check_invariants(
    sched: Scheduler, out: SchedulerOutput | None = None, finished: Iterable[Request] = ()
) -> None:
    """Blocks owned once, one state per request, budget kept, nothing lost."""
    pool = sched.pool
    live = list(sched.live_requests())
    ids = [r.request_id for r in live]
    _check(len(ids) == len(set(ids)), "a request is in two queues")
    host: list[int] = [b for r in live for b in r.host_block_ids]
    _check_device_blocks(sched, live)
    _check(
        sorted(host + pool.host.free_ids()) == list(range(pool.num_host_blocks)),
        "host blocks are not each owned once or free",
    )
    for r in live:
        _check(not r.is_finished, f"{r.request_id}: live in {r.status}")
        paused = sched.is_paused(r.request_id)
        _check(paused == r.status.is_paused, f"{r.request_id}: {r.status}, paused={paused}")
        if paused:
            _check(r.in_call, f"{r.request_id}: paused without an open call")
        else:
            _check(r.num_uncomputed_tokens >= 1, f"{r.request_id}: runnable, nothing to compute")
        held = len(r.block_ids) + len(r.host_block_ids)
        _check(
            held == pool.blocks_for(r.num_computed_tokens),
            f"{r.request_id}: holds {held} blocks for {r.num_computed_tokens} computed tokens",
        )
        _check(
            r.status is RequestStatus.PAUSED_SWAPPED
            or r.status is RequestStatus.RESUMABLE_SWAPPED
            or not r.host_block_ids,
            f"{r.request_id}: host blocks in {r.status}",
        )
    for rid in sched.kv.reclaimable:
        _check(sched.is_paused(rid), f"{rid}: reclaimable but not paused")
    queue = sched.requests.queue
    if queue is not None:
        for r in live:
            if sched.is_paused(r.request_id):
                _check(r not in queue, f"{r.request_id}: paused and queued")
                continue
            holds = bool(r.block_ids or r.host_block_ids)
            queued = r in queue
            _check(
                queued == (not holds and r.protected is None),
                f"{r.request_id}: holds KV={holds}, protected={r.protected}, queued={queued}",
            )
        _check(
            len(queue) + len(sched.requests.held) == sched.num_live - sched.num_in_calls(),
            "the queue and the KV holders do not add up to the runnable requests",
        )
    for r in finished:
        _check(not r.block_ids and not r.host_block_ids, f"{r.request_id}: finished with blocks")
    if out is not None:
        _check(out.num_scheduled_tokens <= out.token_budget, "scheduled tokens exceed the budget")
        _check(len(out.chunks) <= sched.config.max_num_seqs, "batch exceeds max_num_seqs")
        for c in out.chunks:
            _check(
                len(c.block_table) * pool.block_size >= c.start_pos + c.num_tokens,
                f"{c.request_id}: block table too short for its chunk",
            )
