"""The scheduler's requests by where they are (docs/design.md, the scheduler's state).

`LiveRequests` is owned by the `Scheduler` (`scheduler.py`): the runnable
requests (WAITING, RUNNING, RESUMABLE_SWAPPED; with incremental ranking split
into `held`, those holding KV, ranked afresh each iteration, and the policy's
persistent `queue` of the others), the paused ones (in an external call), and
the ids aborted during their call (whose result is dropped when it comes back).
It moves requests between these sets and counts them; the transitions that
decide anything are the scheduler's.
"""

from __future__ import annotations

from collections.abc import Sequence

from augserve.core.request import Request, RequestStatus
from augserve.sched.kv_manager import KVCacheManager
from augserve.sched.output import ScheduledChunk, SchedulerStats
from augserve.sched.ranking import RankQueue
from augserve.sched.sessions import SessionTable


class LiveRequests:
    def __init__(self, queue: RankQueue | None) -> None:
        self.runnable: dict[str, Request] = {}  # WAITING, RUNNING, RESUMABLE_SWAPPED
        self.queue = queue  # incremental ranking: the runnable ones without KV
        self.held: dict[str, Request] = {}  # incremental ranking: the runnable ones with KV
        self.paused: dict[str, Request] = {}  # in an external call
        self.aborted_in_call: set[str] = set()

    def __contains__(self, request_id: object) -> bool:
        return request_id in self.runnable or request_id in self.paused

    def __len__(self) -> int:
        return len(self.runnable) + len(self.paused)

    def get(self, request_id: str) -> Request | None:
        return self.runnable.get(request_id) or self.paused.get(request_id)

    def all(self) -> list[Request]:
        return [*self.runnable.values(), *self.paused.values()]

    # --- moves -------------------------------------------------------------------
    def add_runnable(self, req: Request, now: float) -> None:
        self.runnable[req.request_id] = req
        if self.queue is None:
            return
        if req.block_ids or req.host_block_ids or req.protected is not None:
            self.held[req.request_id] = req
        else:
            self.queue.add(req, now)

    def drop_runnable(self, req: Request) -> None:
        if (
            self.runnable.pop(req.request_id, None) is not None
            and self.queue is not None
            and self.held.pop(req.request_id, None) is None
        ):
            self.queue.remove(req)

    def pause(self, req: Request) -> None:
        """The request starts a call."""
        self.drop_runnable(req)
        self.paused[req.request_id] = req

    def remove(self, req: Request) -> None:
        """The request finished."""
        self.drop_runnable(req)
        self.paused.pop(req.request_id, None)

    def take_returned(
        self, request_id: str, num_returned: int, token_ids: Sequence[int] | None
    ) -> Request | None:
        """The paused request whose call came back (None: aborted during its call)."""
        req = self.paused.get(request_id)
        if req is None:
            if request_id in self.aborted_in_call:
                self.aborted_in_call.discard(request_id)
                return None
            raise KeyError(f"request {request_id!r} is not paused in a call")
        if token_ids is not None and len(token_ids) != num_returned:
            raise ValueError(f"resume {request_id!r}: {len(token_ids)} ids for {num_returned}")
        del self.paused[request_id]
        return req

    def candidates(self) -> list[Request]:
        """What the packer ranks afresh: every runnable request, or with the queue the
        ones holding KV (the queue offers the others)."""
        return list((self.runnable if self.queue is None else self.held).values())

    def scheduled(self, chunks: Sequence[ScheduledChunk], now: float) -> None:
        """The chunks' requests run in the iteration decided at `now`."""
        running = RequestStatus.RUNNING
        for chunk in chunks:
            req = chunk.request
            req.status = running
            req.last_scheduled_time = now
            if req.first_scheduled_time is None:
                req.first_scheduled_time = now

    def requeue(
        self, admitted: Sequence[Request], preempted: Sequence[Request], now: float
    ) -> None:
        """Move requests that got KV out of the queue, and those that lost it in."""
        queue, held = self.queue, self.held
        if queue is None:
            return
        for req in admitted:
            queue.remove(req)
            held[req.request_id] = req
        for req in preempted:  # a protected request stays out of the queue
            if not (req.block_ids or req.host_block_ids or req.protected is not None):
                del held[req.request_id]
                queue.add(req, now)

    # --- counts ------------------------------------------------------------------
    def count_running(self) -> tuple[int, int]:
        """L_other (tokens held by running requests) and MARS's running batch (tokens
        they compute next)."""
        tokens = batch = 0
        running = RequestStatus.RUNNING
        reqs = self.runnable if self.queue is None else self.held  # RUNNING holds KV
        for r in reqs.values():
            if r.status is running:
                tokens += r.num_computed_tokens
                batch += r.num_tokens - r.num_computed_tokens
        return tokens, batch

    def stats(
        self, kv: KVCacheManager, sessions: SessionTable | None, token_budget: int
    ) -> SchedulerStats:
        counts = {s: 0 for s in RequestStatus}
        swapped = 0
        in_sessions = sessions.requests if sessions is not None else {}
        for r in self.all():
            if r.request_id not in in_sessions:  # client sessions are counted apart
                counts[r.status] += 1
            swapped += bool(r.host_block_ids)
        pool, prefix = kv.pool, kv.prefix
        return SchedulerStats(
            num_waiting=counts[RequestStatus.WAITING],
            num_running=counts[RequestStatus.RUNNING] + counts[RequestStatus.RESUMABLE_SWAPPED],
            num_paused={
                "preserve": counts[RequestStatus.PAUSED_PRESERVED],
                "swap": counts[RequestStatus.PAUSED_SWAPPED],
                "discard": counts[RequestStatus.PAUSED_DISCARDED],
            },
            num_swapped=swapped,
            device_blocks_used=pool.num_device_blocks - pool.num_free_device,
            device_blocks_total=pool.num_device_blocks,
            host_blocks_used=pool.num_host_blocks - pool.num_free_host,
            host_blocks_total=pool.num_host_blocks,
            token_budget=token_budget,
            device_blocks_cached=pool.device.num_cached_free,
            prefix_cache_queries=prefix.stats.queries if prefix else 0,
            prefix_cache_hits=prefix.stats.hits if prefix else 0,
            num_sessions=len(in_sessions),
            preemptions=dict(kv.preemptions),
            recomputed_tokens=kv.recomputed_tokens,
        )
