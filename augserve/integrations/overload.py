"""Our overload rule inside another engine (vLLM): the admission gate over its blocks.

A policy that gates admission (`RankingPolicy.admission_growth`: `augserve-slo`) keeps
memory for the growth of the requests already running (`sched/admission.py`): without
it, under memory pressure the engine admits new requests until the running ones run
out of room as they decode and get preempted (recomputed), the thrash our simulator
shows for vLLM's policy past the knee. Our packer asks the gate while it allocates;
vLLM's scheduler allocates by itself, so the plugin asks before each step, in the
policy's order, how many of the waiting requests the gate lets through
(`admitted_count`), and shows vLLM only those (`vllm.py`). The same `GrowthGate`
decides, over a `GateMemory` of vLLM's counts: the blocks a running request holds are
its tokens' (computed or being computed), the room is vLLM's free blocks (its
evictable prefix cache included) plus the client sessions' turns the plugin holds
(`holds.py`), and each request let through takes its prompt's blocks from the room.
Prefix-cache hits are not foreseen (the gate is conservative there). With no running
request it lets the first through, as our packer does: it never waits on a growth
nobody will make.
"""

from __future__ import annotations

from collections.abc import Sequence

from augserve.core.request import Request
from augserve.sched.admission import GrowthGate


class EngineGateMemory:
    """A `GateMemory` over an engine's block counts at the start of a step."""

    def __init__(self, block_size: int, num_blocks: int, free: int, reclaimable: int) -> None:
        self.block_size = block_size
        self.num_device_blocks = num_blocks
        self._room = free + reclaimable
        self._held: dict[str, int] = {}

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def held_blocks(self, req: Request) -> int:
        return self._held.get(req.request_id, 0)

    def room(self) -> int:
        return self._room

    def running(self, req: Request) -> None:
        """`req` runs: it holds its tokens' blocks (already out of the engine's free)."""
        self._held[req.request_id] = self.blocks_for(req.num_tokens)

    def admit(self, req: Request) -> None:
        """`req` is let through: its prompt's blocks leave the room."""
        blocks = self.blocks_for(req.num_tokens)
        self._room -= blocks
        self._held[req.request_id] = blocks


def admitted_count(
    frac: float | None,
    running: Sequence[Request],
    waiting: Sequence[Request],
    memory: EngineGateMemory,
) -> int:
    """How many of `waiting` (in the policy's order) the gate lets through this step;
    all of them for a policy without a gate (`frac` None). `running` and `waiting` are
    the engine requests' mirrors."""
    if frac is None:
        return len(waiting)
    for req in running:
        memory.running(req)
    gate = GrowthGate(frac, memory, running)
    for n, req in enumerate(waiting):
        if not gate.admits(req):
            return n
        memory.admit(req)
        gate.admitted(req)
    return len(waiting)
