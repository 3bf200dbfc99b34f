"""What the scheduler tells an executor each iteration, and what it hears back."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from augserve.core.cost import BatchShape
from augserve.core.request import FinishReason, Request


@dataclass(slots=True)
class ScheduledChunk:
    """Compute `num_tokens` tokens of `request` from position `start_pos`.

    A chunk that reaches the end of the context samples one new token
    (`sample`); otherwise it is a piece of a prefill, a recompute or the
    prefill of a call's returned tokens.
    """

    request: Request
    num_tokens: int
    start_pos: int
    sample: bool

    @property
    def is_decode(self) -> bool:
        return self.num_tokens == 1 and self.sample and self.start_pos > 0


@dataclass(slots=True)
class SchedulerOutput:
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
        """The work of this iteration, for a cost model."""
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
    """An executor's report for one sampling chunk."""

    token_id: int | None = None
    event: StepEvent = StepEvent.NONE
    finish_reason: FinishReason = FinishReason.STOP
