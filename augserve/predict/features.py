"""Features and targets of the learned predictor (docs/paper.md section 5).

One row per segment. Features are computed from a live `Request` exactly as the
scheduler holds it when it asks for a prediction (on arrival and at every call
return): prompt length, context length at the start of the segment, segment
index, previous call's duration and returned length, running means over earlier
segments, whether there is text, and (optionally) the augmentation kind. The
request's `segments` (the plan) are never read here.

Training rows are built by replaying a trace request into exactly that runtime
state (`runtime_state`), so training and serving share one feature function.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from augserve.core.request import CallRecord, Request, Segment

FEATURE_VERSION = 1
BUCKET_SIZE = 50  # tokens per output-length class (docs/paper.md section 5)
MAX_SEGMENT_INDEX = 32

META_NAMES = (
    "log_prompt_len",
    "log_context_len",
    "segment_index",
    "has_prev_call",
    "log_prev_call_time",
    "log_prev_return_len",
    "log_mean_prev_output",
    "log_mean_prev_call_time",
    "log_total_call_time",
    "has_text",
)


class TraceLike(Protocol):
    """What training needs of a trace request (`augserve.workload.trace.TraceRequest`)."""

    @property
    def request_id(self) -> str: ...
    @property
    def prompt_len(self) -> int: ...
    @property
    def segments(self) -> Sequence[Segment]: ...
    @property
    def prompt_text(self) -> str | None: ...


def request_kind(req: Any) -> str | None:
    """The augmentation kind a live request carries, if any. Asked while a call
    starts (the engine knows the tool then), the tool's name is the kind."""
    calls = getattr(req, "calls", None)
    if calls and calls[-1].end is None and isinstance(calls[-1].tool, str):
        return str(calls[-1].tool)
    kind = getattr(req, "kind", None)
    return kind if isinstance(kind, str) else None


def meta_features(req: Request) -> list[float]:
    """Metadata features of `req`'s current segment, in `META_NAMES` order."""
    k = req.segment_index
    done_calls = [c for c in req.calls if c.end is not None]
    durations = [max(0.0, c.end - c.start) for c in done_calls if c.end is not None]
    prev = done_calls[-1] if done_calls else None
    prev_time = durations[-1] if durations else 0.0
    prev_out = max(0, req.num_generated_tokens - req.segment_generated)
    return [
        math.log1p(req.prompt_len),
        math.log1p(max(0, req.num_tokens - req.segment_generated)),
        float(min(k, MAX_SEGMENT_INDEX)),
        1.0 if prev is not None else 0.0,
        math.log1p(prev_time),
        math.log1p(prev.returned_tokens if prev is not None else 0),
        math.log1p(prev_out / k) if k > 0 else 0.0,
        math.log1p(sum(durations) / len(durations)) if durations else 0.0,
        math.log1p(sum(durations)),
        1.0 if req.prompt_text else 0.0,
    ]


def kind_features(kind: str | None, kinds: Sequence[str]) -> list[float]:
    """One-hot over `kinds`, all zeros for an unknown or missing kind."""
    return [1.0 if kind == k else 0.0 for k in kinds]


def bucket_of(output_len: float, n_buckets: int) -> int:
    return min(int(output_len) // BUCKET_SIZE, n_buckets - 1)


def bucket_middle(bucket: int) -> float:
    return bucket * BUCKET_SIZE + BUCKET_SIZE / 2


@dataclass(frozen=True, slots=True)
class SegmentRow:
    """One training / evaluation example: a request in its state at a segment start."""

    request: Request  # runtime state only; `segments` is empty
    kind: str | None
    output_len: int
    has_call: bool
    call_time: float  # 0.0 when no call
    return_len: int


def runtime_state(tr: TraceLike, k: int, arrival_time: float = 0.0) -> Request:
    """The live `Request` for `tr` at the start of its segment `k` (as the scheduler sees it).

    Earlier segments are done: their tokens were generated, their calls ran and
    returned. The plan itself is not attached (`segments` stays empty).
    """
    req = Request(
        request_id=tr.request_id,
        arrival_time=arrival_time,
        prompt_len=tr.prompt_len,
        prompt_text=tr.prompt_text,
    )
    now = arrival_time
    for seg in tr.segments[:k]:
        req.num_tokens += seg.output_len
        req.num_generated_tokens += seg.output_len
        now += 0.05 * seg.output_len  # nominal decode time; features use durations only
        if seg.call_time is not None:
            req.calls.append(CallRecord(now, now + seg.call_time, seg.return_len))
            now += seg.call_time
            req.num_tokens += seg.return_len
            req.num_returned_tokens += seg.return_len
    req.segment_index = k
    return req


def segment_rows(trace: Sequence[TraceLike]) -> Iterator[SegmentRow]:
    """Every segment of every request of `trace`, as a `SegmentRow`."""
    for tr in trace:
        kind = getattr(tr, "kind", None)
        for k, seg in enumerate(tr.segments):
            req = runtime_state(tr, k)
            yield SegmentRow(
                request=req,
                kind=kind if isinstance(kind, str) else None,
                output_len=seg.output_len,
                has_call=seg.has_call,
                call_time=float(seg.call_time or 0.0),
                return_len=seg.return_len if seg.has_call else 0,
            )


def meta_matrix(
    requests: Sequence[Request],
    kinds: Sequence[str] | None,
    row_kinds: Sequence[str | None] | None = None,
) -> np.ndarray:
    """Metadata (+ kind one-hot when `kinds` is given) for a batch, float32 [n, d].

    `row_kinds` gives each request's kind (training knows it from the trace);
    by default it is read from the request (`request_kind`).
    """
    if row_kinds is None:
        row_kinds = [request_kind(r) for r in requests]
    rows = []
    for req, kind in zip(requests, row_kinds, strict=True):
        row = meta_features(req)
        if kinds is not None:
            row += kind_features(kind, kinds)
        rows.append(row)
    width = len(META_NAMES) + (len(kinds) if kinds is not None else 0)
    return np.asarray(rows, dtype=np.float32).reshape(len(requests), width)
