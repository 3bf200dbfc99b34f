"""What the scheduler tells an executor, and what it hears back (docs/design.md, the contract).

    out = sched.schedule(now)                          # SchedulerOutput: chunks with their
                                                       # block tables, swaps, discards
    upd = sched.update_from_output(out, results, now)  # SchedulerUpdate: finished, calls
                                                       # started, KV freed or discarded
    upd = sched.resume(request_id, num_returned, now)  # resumed (or finished)

Executors learn everything from these objects and never read the scheduler's
queues.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from augserve.core.latency import BatchShape
from augserve.core.request import ContextPolicy, FinishReason, Request


@dataclass(slots=True)
class ScheduledChunk:
    """Compute `num_tokens` tokens of `request` from position `start_pos`.

    A chunk that reaches the end of the context samples one new token
    (`sample`); otherwise it is a piece of a prefill, a recompute or the
    prefill of a call's returned tokens. `block_table` lists the device blocks
    holding positions [0, start_pos + num_tokens), in order; it is valid until
    the next `schedule()`.
    """

    request: Request
    num_tokens: int
    start_pos: int
    sample: bool
    block_table: list[int]

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def is_decode(self) -> bool:
        return self.num_tokens == 1 and self.sample and self.start_pos > 0


@dataclass(slots=True)
class SchedulerOutput:
    """One iteration's decision: do the swaps first, then compute the chunks."""

    now: float
    chunks: list[ScheduledChunk] = field(default_factory=list)
    swap_out: list[tuple[int, int]] = field(default_factory=list)  # device block -> host block
    swap_in: list[tuple[int, int]] = field(default_factory=list)  # host block -> device block
    discarded: list[str] = field(default_factory=list)  # requests whose KV was dropped
    token_budget: int = 0

    @property
    def num_scheduled_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks and not self.swap_out and not self.swap_in

    def batch_shape(self, block_size: int) -> BatchShape:
        """The work of this iteration, for a latency model."""
        prefill = attn = decode = ctx = 0
        for c in self.chunks:
            if c.is_decode:
                decode += 1
                ctx += c.start_pos + 1
            else:
                n = c.num_tokens
                prefill += n
                attn += n * c.start_pos + n * (n + 1) // 2
        swap = (len(self.swap_out) + len(self.swap_in)) * block_size
        return BatchShape(prefill, attn, decode, ctx, swap)


class StepEvent(enum.Enum):
    NONE = "none"
    CALL = "call"  # the sampled token ends the segment: an external call starts
    FINISH = "finish"  # the sampled token ends the request


@dataclass(frozen=True, slots=True)
class StepResult:
    """An executor's report for one sampling chunk. A CALL may name its tool and the
    size of its arguments (predictor features)."""

    token_id: int | None = None
    event: StepEvent = StepEvent.NONE
    finish_reason: FinishReason = FinishReason.STOP
    tool: str | None = None
    args_len: int = 0


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    request: Request
    reason: FinishReason


@dataclass(frozen=True, slots=True)
class StartedCall:
    """A request paused for its call; `policy` is the context policy planned for it
    (Discard and Swap are applied lazily, when memory is needed)."""

    request: Request
    policy: ContextPolicy


@dataclass(slots=True)
class SchedulerUpdate:
    """What changed in one reported event: the executor acts on exactly this."""

    finished: list[FinishedRequest] = field(default_factory=list)
    calls_started: list[StartedCall] = field(default_factory=list)
    kv_discarded: list[str] = field(default_factory=list)  # dropped at a call, recompute later
    # ended with "tool_calls" and kept as a paused client session (`sessions.py`): the
    # client's response ends here, the request stays paused in the scheduler
    sessions_paused: list[Request] = field(default_factory=list)

    def merge(self, other: SchedulerUpdate) -> None:
        self.finished += other.finished
        self.calls_started += other.calls_started
        self.kv_discarded += other.kv_discarded
        self.sessions_paused += other.sessions_paused

    @property
    def finished_ids(self) -> list[str]:
        return [f.request.request_id for f in self.finished]


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """A snapshot of the scheduler's state, for metrics."""

    num_waiting: int  # no KV for its context yet (new, discarded, preempted)
    num_running: int  # holds device KV and can compute
    # in a server-side call (client sessions apart), by context policy: preserve, swap, discard
    num_paused: dict[str, int]
    num_swapped: int  # requests holding host blocks
    device_blocks_used: int
    device_blocks_total: int
    host_blocks_used: int
    host_blocks_total: int
    token_budget: int  # the last iteration's token budget
    device_blocks_cached: int = 0  # free device blocks still holding cached KV
    prefix_cache_queries: int = 0  # tokens looked up in the prefix cache at admission
    prefix_cache_hits: int = 0  # of them, tokens found
    num_sessions: int = 0  # paused client sessions (`sessions.py`), not in num_paused
    # KV taken under pressure so far, by reason (`KVCacheManager.preemptions`), and the
    # computed tokens it threw away
    preemptions: dict[str, int] = field(default_factory=dict)
    recomputed_tokens: int = 0
