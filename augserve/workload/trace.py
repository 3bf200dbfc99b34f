"""The trace schema: requests as planned work, before they arrive anywhere.

A `TraceRequest` is immutable and carries no time; `to_request` turns it into
a live `augserve.core.request.Request` at a given arrival time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from augserve.core.request import Request, Segment

# Augmentation types (values of `TraceRequest.kind`), after INFERCEPT's six.
KIND_MATH = "math"
KIND_QA = "qa"
KIND_VE = "alfworld"
KIND_CHAT = "chatbot"
KIND_TTS = "tts"
KIND_IMAGE = "image"
KINDS = (KIND_MATH, KIND_QA, KIND_VE, KIND_CHAT, KIND_TTS, KIND_IMAGE)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace: a prompt, then segments (generate, maybe call)."""

    request_id: str
    prompt_len: int
    segments: tuple[Segment, ...]
    prompt_text: str | None = None
    kind: str | None = None  # augmentation type / tool family, when known
    # the first `shared_prefix` prompt tokens are the same for every request of the
    # same `kind` (a system prompt with the tools' docs); 0: nothing shared
    shared_prefix: int = 0

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("TraceRequest.request_id must be a non-empty string")
        if self.prompt_len <= 0:
            raise ValueError(f"TraceRequest.prompt_len must be > 0, got {self.prompt_len}")
        if not self.segments:
            raise ValueError("TraceRequest.segments must hold at least one segment")
        if not 0 <= self.shared_prefix <= self.prompt_len:
            raise ValueError(
                f"TraceRequest.shared_prefix must be in [0, prompt_len], got {self.shared_prefix}"
            )
        if self.shared_prefix and self.kind is None:
            raise ValueError("TraceRequest.shared_prefix needs a kind (the requests sharing it)")

    @property
    def num_calls(self) -> int:
        return sum(1 for s in self.segments if s.has_call)

    @property
    def output_len(self) -> int:
        """Tokens generated over all segments."""
        return sum(s.output_len for s in self.segments)

    @property
    def returned_len(self) -> int:
        return sum(s.return_len for s in self.segments if s.has_call)

    @property
    def call_time_total(self) -> float:
        return sum(s.call_time for s in self.segments if s.call_time is not None)

    def to_request(self, arrival_time: float, request_id: str | None = None) -> Request:
        """A fresh live `Request` for this plan, arriving at `arrival_time`."""
        return Request(
            request_id=self.request_id if request_id is None else request_id,
            arrival_time=arrival_time,
            prompt_len=self.prompt_len,
            segments=list(self.segments),
            prompt_text=self.prompt_text,
            kind=self.kind,
        )


@dataclass(frozen=True)
class Trace:
    """A named, ordered collection of `TraceRequest`s."""

    name: str
    requests: tuple[TraceRequest, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not isinstance(self.requests, tuple):
            object.__setattr__(self, "requests", tuple(self.requests))

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[TraceRequest]:
        return iter(self.requests)

    def __getitem__(self, index: int) -> TraceRequest:
        return self.requests[index]

    def to_requests(self, arrival_times: Sequence[float], unique_ids: bool = True) -> list[Request]:
        """Pair the i-th request with the i-th arrival time.

        With `unique_ids`, ids become `"{i}-{request_id}"` so that a resampled
        trace (the same plan drawn twice) still yields distinct ids.
        """
        if len(arrival_times) > len(self.requests):
            raise ValueError(
                f"arrival_times: {len(arrival_times)} times for {len(self.requests)} requests"
            )
        return [
            tr.to_request(t, f"{i}-{tr.request_id}" if unique_ids else None)
            for i, (tr, t) in enumerate(zip(self.requests, arrival_times, strict=False))
        ]
