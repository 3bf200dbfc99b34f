"""Our memory rules on vLLM's v1 scheduler, mixed into `vllm.AugServeScheduler`: client
sessions' KV held through their calls (`holds.py` says what and why) and the admission
gate (`overload.py`).

Holds.
vLLM frees a finished request in `_free_request`, whose last act is `_free_blocks`:
the blocks go back to the pool, into the prefix cache where they carry a hash. For a
turn our policy holds, `_free_blocks` leaves them referenced (the request leaves
`requests` as usual; the workers were told it finished, and its blocks' contents stay
where they are, since nothing can allocate them). The session's next turn finds them
by its prefix lookup like any cached block, and once it has been scheduled (it now
references the shared blocks itself) the old turn's blocks are freed as vLLM would
have freed them. Before each step, holds past their time are freed, and so many more,
latest predicted return first, that the step's need fits in the free blocks; the
dynamic budget counts the held blocks as reclaimable.

The gate. vLLM admits waiting requests in queue order (ours, `vllm._rank`) while
blocks and budget last; before its step the waiting requests our gate holds back are
taken out of its queue, and put back at its end after the step.

vLLM is not imported here: the scheduler is reached through `self`.
"""

from __future__ import annotations

import time
from typing import Any

from augserve.integrations.bridge import PolicyBridge
from augserve.integrations.holds import Held, SessionHolds
from augserve.integrations.overload import EngineGateMemory


class KVMemoryMixin:
    """`_free_blocks`, the holds' release points and the gate; `_AugServeMixin` calls
    `_hold_at_free`, `_successor`, `_release_before_step`, `_release_after_step`,
    `_gate_waiting` and `_ungate`."""

    augserve: PolicyBridge
    _holds: SessionHolds
    _hold_next: tuple[str, str, float, float] | None  # request id, session, call s, now

    def _init_holds(self, ttl_s: float) -> None:
        self._holds = SessionHolds(ttl_s)
        self._hold_next = None

    def _hold_at_free(self, request_id: str, session: str, call_s: float, now: float) -> None:
        """The request now being freed is held (in `_free_blocks`)."""
        self._hold_next = (request_id, session, call_s, now)

    def _free_blocks(self, request: Any) -> None:
        sched: Any = self
        nxt, self._hold_next = self._hold_next, None
        if nxt is None or nxt[0] != request.request_id:
            super()._free_blocks(request)  # type: ignore[misc]
            return
        _, session, call_s, now = nxt
        blocks = -(-request.num_computed_tokens // sched.block_size)
        for old in self._holds.hold(request.request_id, request, session, blocks, now, call_s):
            self._unhold(old)
        del sched.requests[request.request_id]

    def reset_prefix_cache(self, *args: Any, **kwargs: Any) -> bool:
        """vLLM resets its prefix cache only when no block is in use: the held turns
        are freed first (a reset would lose their contexts anyway)."""
        for held in self._holds.release_all():
            self._unhold(held)
        done: bool = super().reset_prefix_cache(*args, **kwargs)  # type: ignore[misc]
        return done

    def _unhold(self, held: Held) -> None:
        """Free a held turn's blocks as vLLM frees a finished request's."""
        sched: Any = self
        free = getattr(sched, "_free_request_blocks", None)  # defers past in-flight steps
        if free is not None:
            free(held.request)
        else:
            sched.kv_cache_manager.free(held.request)

    def _successor(self, session: str | None, request_id: str) -> None:
        self._holds.successor_arrived(session, request_id, time.monotonic())

    def _release_before_step(self, now: float) -> int:
        """Free the holds past their time, then as many as the step needs; returns the
        blocks still held (reclaimable)."""
        sched: Any = self
        for held in self._holds.due(now, ()):
            self._unhold(held)
        if len(self._holds):
            free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
            for held in self._holds.victims(free, self._block_need()):
                self._unhold(held)
        return self._holds.blocks()

    def _release_after_step(self, now: float, scheduled: Any, gone: Any = ()) -> None:
        """Free the holds whose next turn was scheduled, or left unscheduled (`gone`)."""
        if len(self._holds):
            for held in self._holds.due(now, scheduled, gone):
                self._unhold(held)

    def _block_need(self) -> int:
        """Blocks the next step may allocate: each running request's for the tokens it
        computes next (a prefill chunk, or a decode token that opens a block), then the
        waiting requests' that fit the step's token budget and seats, each its chunk's
        or, where vLLM admits a request only if its whole input fits
        (`scheduler_reserve_full_isl`, on by default), its whole input's (a held
        session's next turn less the blocks it will find)."""
        sched: Any = self
        bs = sched.block_size
        budget = sched.max_num_scheduled_tokens
        need = 0
        for req in sched.running:
            done = req.num_computed_tokens
            chunk = min(budget, max(1, req.num_tokens - done))
            need += -(-(done + chunk) // bs) - -(-done // bs)
            budget -= chunk
        full = bool(getattr(sched, "scheduler_reserve_full_isl", False))
        seats = sched.max_num_running_reqs - len(sched.running)
        for req in sched.waiting:
            if budget <= 0 or seats <= 0:
                break
            left = max(0, req.num_tokens - req.num_computed_tokens)
            chunk = min(budget, left)
            blocks = -(-(left if full else chunk) // bs)
            need += max(0, blocks - self._holds.covered(req.request_id))
            budget -= chunk
            seats -= 1
        return need

    # --- the gate ----------------------------------------------------------------------
    def _gate_waiting(self, held: int) -> list[Any]:
        """Take the waiting requests our admission gate holds back this step out of
        vLLM's queue (in our order already); returns them for `_ungate`."""
        sched: Any = self
        if not sched.waiting or self.augserve.admission_share() is None:
            return []  # no gate: nothing to copy on this per-step path
        waiting = list(sched.waiting)
        free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
        memory = EngineGateMemory(sched.block_size, self.augserve.facts.num_blocks, free, held)
        running = (r.request_id for r in sched.running)
        n = self.augserve.admissions(running, [r.request_id for r in waiting], memory)
        deferred = waiting[n:]
        if deferred:
            sched.waiting.remove_requests(deferred)
        return deferred

    def _ungate(self, deferred: list[Any]) -> None:
        sched: Any = self
        for req in deferred:
            sched.waiting.add_request(req)
