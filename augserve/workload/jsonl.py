"""Our JSONL trace format: one request per line (see docs/trace-format.md).

    {"request_id": "r1", "prompt_len": 12, "prompt_text": "...", "kind": "math",
     "arrival_time": 0.5,
     "segments": [{"output_len": 5, "call_time": 0.1, "return_len": 3, "tool": "calc"},
                  {"output_len": 7, "call_time": null, "return_len": 0, "tool": null}]}

`prompt_text`, `kind`, `shared_prefix` (the first prompt tokens every request of the
same kind starts with; default 0) and `arrival_time` are optional (null or absent); in a
segment `call_time`, `return_len` and `tool` are optional (default: no call,
0, null). Blank lines are skipped. Writing then reading gives back equal
`TraceRequest`s (floats are written with `repr`, which round-trips exactly).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from augserve.core.request import Segment
from augserve.workload.errors import TraceFormatError, check_float, check_int, check_str
from augserve.workload.trace import Trace, TraceRequest

_REQUEST_FIELDS = {
    "request_id", "prompt_len", "prompt_text", "kind", "shared_prefix", "arrival_time", "segments"
}  # fmt: skip
_SEGMENT_FIELDS = {"output_len", "call_time", "return_len", "tool"}


def request_to_dict(tr: TraceRequest, arrival_time: float | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"request_id": tr.request_id, "prompt_len": tr.prompt_len}
    if tr.prompt_text is not None:
        row["prompt_text"] = tr.prompt_text
    row["kind"] = tr.kind
    if tr.shared_prefix:
        row["shared_prefix"] = tr.shared_prefix
    if arrival_time is not None:
        row["arrival_time"] = arrival_time
    row["segments"] = [
        {
            "output_len": s.output_len,
            "call_time": s.call_time,
            "return_len": s.return_len,
            "tool": s.tool,
        }
        for s in tr.segments
    ]
    return row


def write_jsonl(
    path: str | Path,
    trace: Trace | Sequence[TraceRequest],
    arrival_times: Sequence[float] | None = None,
) -> None:
    """Write `trace` (optionally with one arrival time per request) as JSONL."""
    requests = list(trace)
    if arrival_times is not None and len(arrival_times) != len(requests):
        raise ValueError(f"arrival_times: {len(arrival_times)} times for {len(requests)} requests")
    lines = [
        json.dumps(request_to_dict(tr, None if arrival_times is None else arrival_times[i]))
        for i, tr in enumerate(requests)
    ]
    Path(path).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def read_jsonl_with_arrivals(
    path: str | Path, name: str | None = None
) -> tuple[Trace, list[float | None]]:
    """Read a JSONL trace; also return each line's `arrival_time` (or None)."""
    path = Path(path)
    requests: list[TraceRequest] = []
    arrivals: list[float | None] = []
    seen: set[str] = set()
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        tr, arrival = _parse_line(path, lineno, line)
        if tr.request_id in seen:
            raise TraceFormatError(
                path, f"line {lineno}", "request_id", f"duplicate id {tr.request_id!r}"
            )
        seen.add(tr.request_id)
        requests.append(tr)
        arrivals.append(arrival)
    if not requests:
        raise TraceFormatError(path, "top level", "(file)", "no requests in file")
    return Trace(name=name or path.stem, requests=tuple(requests)), arrivals


def read_jsonl(path: str | Path, name: str | None = None) -> Trace:
    """Read a JSONL trace; raises `TraceFormatError` (a ValueError) on bad input."""
    return read_jsonl_with_arrivals(path, name)[0]


def _parse_line(path: Path, lineno: int, line: str) -> tuple[TraceRequest, float | None]:
    where = f"line {lineno}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(path, where, "(json)", f"bad JSON: {exc.msg}") from exc
    if not isinstance(row, dict):
        raise TraceFormatError(path, where, "(json)", "expected an object")
    for key in ("request_id", "prompt_len", "segments"):
        if key not in row:
            raise TraceFormatError(path, where, key, "missing")
    unknown = set(row) - _REQUEST_FIELDS
    if unknown:
        raise TraceFormatError(path, where, sorted(unknown)[0], "unknown field")
    rid = check_str(row["request_id"], path, where, "request_id")
    where = f"line {lineno} (request {rid!r})"
    prompt_len = _nonneg_int(row["prompt_len"], path, where, "prompt_len")
    if prompt_len == 0:
        raise TraceFormatError(path, where, "prompt_len", "must be > 0, got 0")
    text = _opt(row.get("prompt_text"), check_str, path, where, "prompt_text")
    kind = _opt(row.get("kind"), check_str, path, where, "kind")
    arrival = _opt(row.get("arrival_time"), check_float, path, where, "arrival_time")
    if arrival is not None and arrival < 0:
        raise TraceFormatError(path, where, "arrival_time", f"must be >= 0, got {arrival}")
    segments = _parse_segments(path, where, row["segments"])
    if not rid:
        raise TraceFormatError(path, where, "request_id", "must be non-empty")
    shared = _nonneg_int(row.get("shared_prefix", 0), path, where, "shared_prefix")
    if shared > prompt_len or (shared and kind is None):
        raise TraceFormatError(path, where, "shared_prefix", "must be <= prompt_len, with a kind")
    return TraceRequest(rid, prompt_len, segments, text, kind, shared), arrival


def _parse_segments(path: Path, where: str, raw: Any) -> tuple[Segment, ...]:
    if not isinstance(raw, list) or not raw:
        raise TraceFormatError(path, where, "segments", "expected a non-empty list")
    segments = []
    for i, seg in enumerate(raw):
        w = f"{where} segment {i}"
        if not isinstance(seg, dict):
            raise TraceFormatError(path, w, "segments", "expected an object")
        if "output_len" not in seg:
            raise TraceFormatError(path, w, "output_len", "missing")
        unknown = set(seg) - _SEGMENT_FIELDS
        if unknown:
            raise TraceFormatError(path, w, sorted(unknown)[0], "unknown field")
        out = _nonneg_int(seg["output_len"], path, w, "output_len")
        call = _opt(seg.get("call_time"), check_float, path, w, "call_time")
        if call is not None and call < 0:
            raise TraceFormatError(path, w, "call_time", f"must be >= 0, got {call}")
        ret = _nonneg_int(seg.get("return_len", 0), path, w, "return_len")
        tool = _opt(seg.get("tool"), check_str, path, w, "tool")
        segments.append(Segment(out, call, ret, tool))
    return tuple(segments)


def _nonneg_int(value: Any, path: Path, where: str, field: str) -> int:
    n = check_int(value, path, where, field)
    if n < 0:
        raise TraceFormatError(path, where, field, f"must be >= 0, got {n}")
    return n


def _opt(value: Any, check: Any, path: Path, where: str, field: str) -> Any:
    return None if value is None else check(value, path, where, field)
