"""Requests of tool-augmented LLM inference (docs/paper.md section 1).

A request is a list of service segments: generate some tokens, then (except
possibly the last segment) make one external call that lasts some time and
returns some tokens that are appended to the context.

Token accounting follows vLLM v1: a request has `num_tokens` tokens in its
context (prompt + generated + returned) and `num_computed_tokens` of them have
KV computed. Prefill, recompute after a discard, prefill of returned tokens and
decode are all the same thing to the scheduler: compute the next
`num_tokens - num_computed_tokens` tokens (in chunks). When a chunk reaches the
end of the context, the model samples one new token.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from augserve.core.token_ids import synthetic_token, synthetic_token_ids


class ContextPolicy(enum.Enum):
    """What happens to a request's KV cache while it waits on an external call."""

    PRESERVE = "preserve"
    SWAP = "swap"
    DISCARD = "discard"


class RequestStatus(enum.IntEnum):
    """Where a request is in its life. Finished states come last (as in vLLM)."""

    WAITING = 0  # new, or its KV was discarded: needs (re)prefill
    RUNNING = 1  # has device KV for its computed tokens; decodes or prefills chunks
    PAUSED_PRESERVED = 2  # in a call; KV on device (its policy may still evict it lazily)
    PAUSED_SWAPPED = 3  # in a call; some or all of its KV on host
    PAUSED_DISCARDED = 4  # in a call; KV freed, recompute on return
    RESUMABLE_SWAPPED = 5  # call returned; KV (partly) on host: swap in, then continue
    FINISHED_STOPPED = 6
    FINISHED_LENGTH = 7
    FINISHED_ABORTED = 8
    FINISHED_ERROR = 9

    @property
    def is_finished(self) -> bool:
        return self >= RequestStatus.FINISHED_STOPPED

    @property
    def is_paused(self) -> bool:
        return RequestStatus.PAUSED_PRESERVED <= self <= RequestStatus.PAUSED_DISCARDED

    @property
    def applied_policy(self) -> ContextPolicy:
        """What a call's paused status says was done to the KV."""
        return _APPLIED[self]

    @property
    def resumed(self) -> RequestStatus:
        """The status a paused request returns to from its call."""
        return _RESUMED[self]


_APPLIED = {
    RequestStatus.PAUSED_PRESERVED: ContextPolicy.PRESERVE,
    RequestStatus.PAUSED_SWAPPED: ContextPolicy.SWAP,
    RequestStatus.PAUSED_DISCARDED: ContextPolicy.DISCARD,
}
_RESUMED = {
    RequestStatus.PAUSED_PRESERVED: RequestStatus.RUNNING,
    RequestStatus.PAUSED_SWAPPED: RequestStatus.RESUMABLE_SWAPPED,
    RequestStatus.PAUSED_DISCARDED: RequestStatus.WAITING,
}


class FinishReason(enum.Enum):
    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"
    TOOL_CALLS = "tool_calls"  # ended on a call the client runs (OpenAI's finish reason)

    @property
    def status(self) -> RequestStatus:
        return _FINISH_STATUS[self]


_FINISH_STATUS = {
    FinishReason.STOP: RequestStatus.FINISHED_STOPPED,
    FinishReason.LENGTH: RequestStatus.FINISHED_LENGTH,
    FinishReason.ABORT: RequestStatus.FINISHED_ABORTED,
    FinishReason.ERROR: RequestStatus.FINISHED_ERROR,
    FinishReason.TOOL_CALLS: RequestStatus.FINISHED_STOPPED,
}


@dataclass(frozen=True, slots=True)
class Segment:
    """One service segment of a trace: generate, then (maybe) call a tool.

    `output_len` tokens are generated before the call; the call lasts
    `call_time` seconds and returns `return_len` tokens. `call_time is None`
    means the segment ends the request without a call.
    """

    output_len: int
    call_time: float | None = None
    return_len: int = 0
    tool: str | None = None

    def __post_init__(self) -> None:
        if self.output_len < 0:
            raise ValueError(f"Segment.output_len must be >= 0, got {self.output_len}")
        if self.call_time is not None and self.call_time < 0:
            raise ValueError(f"Segment.call_time must be >= 0, got {self.call_time}")
        if self.return_len < 0:
            raise ValueError(f"Segment.return_len must be >= 0, got {self.return_len}")

    @property
    def has_call(self) -> bool:
        return self.call_time is not None


@dataclass(slots=True)
class CallRecord:
    """One external call as it really happened."""

    start: float
    end: float | None = None
    returned_tokens: int = 0
    policy: ContextPolicy | None = None  # the context policy applied while waiting
    tool: str | None = None  # the tool called, where the executor knows it
    args_len: int = 0  # size of the call's arguments (characters), a predictor feature


@dataclass(eq=False)
class Request:
    """A request and everything the scheduler, executors and metrics track about it.

    `segments` is the plan known to a trace-driven executor and to the oracle
    predictor; the scheduler never reads it to decide what happens next (the
    executor tells it through `update_from_output`).
    """

    request_id: str
    arrival_time: float
    prompt_len: int
    segments: list[Segment] = field(default_factory=list)
    prompt_text: str | None = None
    kind: str | None = None  # augmentation type / tool family, where the workload knows it
    token_ids: list[int] | None = None  # the engine keeps real tokens; the simulator does not
    max_tokens: int | None = None  # cap on generated tokens (all segments together)
    session_id: str | None = None  # turns of one agent session share it (synthetic ids' key)
    cache_salt: str | None = None  # the tenant's salt: starts its prefix-cache hash chain and
    # scopes its sessions (`sched/prefix_cache.py`, `sched/sessions.py`); None: shared
    opaque_tokens: bool = False  # token_ids stand in for unknown content (a trace of lengths):
    # the prefix cache names the blocks by the request, which shares them with no other

    # --- token accounting --------------------------------------------------
    num_tokens: int = 0  # tokens in the context: prompt + generated + returned
    num_computed_tokens: int = 0  # tokens whose KV exists (on device or on host)
    num_generated_tokens: int = 0
    num_returned_tokens: int = 0
    segment_index: int = 0
    segment_generated: int = 0  # tokens generated in the current segment

    # --- scheduler state ------------------------------------------------------
    status: RequestStatus = RequestStatus.WAITING
    block_ids: list[int] = field(default_factory=list)  # device blocks, in context order
    host_block_ids: list[int] = field(default_factory=list)  # host blocks (a suffix)
    context_policy: ContextPolicy | None = None  # chosen for the current / last call
    queue_time: float = 0.0  # FCFS key: original arrival (vllm re-queues with a new one)
    last_scheduled_time: float = 0.0
    pred_output_len: float = 0.0  # predicted tokens still to generate in this segment
    pred_call_time: float | None = None  # predicted duration of the call ending it
    pred_return_len: float = 0.0
    # --- progress (sched/progress.py) ------------------------------------------
    num_preemptions: int = 0  # times its KV was taken while runnable, in this segment
    protected: int | None = None  # protection order once preempted too often (None: not)
    kv_order: int | None = None  # when it last got KV (admission, hand-over): rule 3's order
    # context a session continuation carried over from its previous turn: that turn's
    # progress, not this one's (the thrash meter's count of tokens that ended)
    num_inherited_tokens: int = 0
    # --- prefix cache (sched/prefix_cache.py) -----------------------------------
    num_cached_tokens: int = 0  # tokens of the context found in the prefix cache
    num_cached_prompt_tokens: int = 0  # prompt tokens hit at the first admission (usage)
    num_hashed_blocks: int = 0  # leading device blocks registered in the prefix cache
    block_hashes: list[int] = field(default_factory=list)  # hashes of full blocks, memo

    # --- timestamps for metrics ------------------------------------------------
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    calls: list[CallRecord] = field(default_factory=list)
    exec_time: float = 0.0  # sum of iteration times this request was in the batch
    finish_reason: FinishReason | None = None

    def __post_init__(self) -> None:
        if self.prompt_len <= 0:
            raise ValueError(f"Request.prompt_len must be > 0, got {self.prompt_len}")
        if self.arrival_time < 0:
            raise ValueError(f"Request.arrival_time must be >= 0, got {self.arrival_time}")
        if self.token_ids is not None and len(self.token_ids) != self.prompt_len:
            raise ValueError("Request.token_ids must hold exactly prompt_len tokens")
        if self.num_tokens == 0:
            self.num_tokens = self.prompt_len
        self.queue_time = self.arrival_time
        self.last_scheduled_time = self.arrival_time

    # --- derived -------------------------------------------------------------
    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def num_tokens_to_compute(self) -> int:
        """Uncomputed tokens, less the prefix cache's hit for a request without KV."""
        if self.num_computed_tokens == 0:
            return self.num_tokens - min(self.num_cached_tokens, self.num_tokens - 1)
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    @property
    def call_time_total(self) -> float:
        """Seconds spent in external calls that have returned (or ended)."""
        return sum((c.end - c.start) for c in self.calls if c.end is not None)

    @property
    def token_key(self) -> str:
        """The key of the request's synthetic token stream (its session, else itself)."""
        return self.session_id or self.request_id

    @property
    def current_segment(self) -> Segment | None:
        if self.segment_index < len(self.segments):
            return self.segments[self.segment_index]
        return None

    @property
    def in_call(self) -> bool:
        return bool(self.calls) and self.calls[-1].end is None

    # --- transitions the executors report ------------------------------------
    def append_generated(self, token_id: int | None, now: float) -> None:
        """One sampled token joins the context."""
        self.num_tokens += 1
        self.num_generated_tokens += 1
        self.segment_generated += 1
        if self.token_ids is not None:
            if token_id is None:  # an executor without a model: the synthetic stream's id
                token_id = synthetic_token(self.token_key, len(self.token_ids))
            self.token_ids.append(token_id)
        if self.first_token_time is None:
            self.first_token_time = now

    def append_returned(self, num_returned: int, token_ids: Sequence[int] | None = None) -> int:
        """The call's result joins the context; returns how many tokens."""
        if self.token_ids is not None:
            if token_ids is None:
                n = len(self.token_ids)
                token_ids = synthetic_token_ids(self.token_key, n, n + num_returned)
            self.token_ids.extend(token_ids)
        self.num_tokens += num_returned
        self.num_returned_tokens += num_returned
        return num_returned

    def end_call(
        self, num_returned: int, token_ids: Sequence[int] | None, now: float
    ) -> CallRecord:
        """The open call came back with `num_returned` tokens (they join the context)."""
        call = self.calls[-1]
        call.end = now
        call.returned_tokens = self.append_returned(num_returned, token_ids)
        return call

    def leave_call(self, now: float) -> ContextPolicy:
        """After `end_call`: the request enters its next segment, runnable again in the
        status its paused one says; returns what was done to its KV during the call."""
        self.calls[-1].policy = applied = self.status.applied_policy
        self.status = self.status.resumed
        self.segment_index += 1
        self.segment_generated = 0
        self.last_scheduled_time = now
        return applied

    def preview_return(self, num_returned: int, now: float) -> Request:
        """A copy in the state `resume` will leave this request in (for predicting
        off the engine loop while the real request waits for its turn)."""
        view = copy.copy(self)
        view.num_tokens = self.num_tokens + num_returned
        view.num_returned_tokens = self.num_returned_tokens + num_returned
        view.segment_index = self.segment_index + 1
        view.segment_generated = 0
        last = self.calls[-1] if self.calls else CallRecord(start=now)
        view.calls = [*self.calls[:-1], CallRecord(last.start, now, num_returned, last.policy)]
        return view

    def generated_limit_reached(self) -> bool:
        return self.max_tokens is not None and self.num_generated_tokens >= self.max_tokens
