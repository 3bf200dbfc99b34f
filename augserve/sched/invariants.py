"""Invariants of a scheduler's state, checked by tests after every step (DESIGN.md)."""

from __future__ import annotations

from augserve.core.request import RequestStatus
from augserve.sched.output import SchedulerOutput
from augserve.sched.scheduler import Scheduler


class InvariantError(AssertionError):
    pass


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise InvariantError(msg)


def check_invariants(sched: Scheduler, out: SchedulerOutput | None = None) -> None:
    """Blocks owned once, one state per request, budget kept, nothing lost."""
    pool = sched.pool
    live = list(sched.runnable.values()) + list(sched.paused.values())
    ids = [r.request_id for r in live]
    _check(len(ids) == len(set(ids)), "a request is in two queues")
    device: list[int] = [b for r in live for b in r.block_ids]
    host: list[int] = [b for r in live for b in r.host_block_ids]
    free_device = pool.device.free_ids()
    free_host = pool.host.free_ids()
    _check(
        sorted(device + free_device) == list(range(pool.num_device_blocks)),
        "device blocks are not each owned once or free",
    )
    _check(
        sorted(host + free_host) == list(range(pool.num_host_blocks)),
        "host blocks are not each owned once or free",
    )
    for r in sched.runnable.values():
        _check(
            not r.status.is_paused and not r.is_finished, f"{r.request_id}: runnable in {r.status}"
        )
        _check(r.num_uncomputed_tokens >= 1, f"{r.request_id}: runnable with nothing to compute")
    for r in sched.paused.values():
        _check(r.status.is_paused, f"{r.request_id}: paused in {r.status}")
        _check(r.in_call, f"{r.request_id}: paused without an open call")
    for r in live:
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
    for r in sched.reclaimable.values():
        _check(r.request_id in sched.paused, f"{r.request_id}: reclaimable but not paused")
    for r in sched.finished:
        _check(not r.block_ids and not r.host_block_ids, f"{r.request_id}: finished with blocks")
    if out is not None:
        _check(out.num_scheduled_tokens <= out.token_budget, "scheduled tokens exceed the budget")
        _check(len(out.chunks) <= sched.config.max_num_seqs, "batch exceeds max_num_seqs")
