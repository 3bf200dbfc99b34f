"""Summary statistics of a trace (pure: no I/O)."""

from __future__ import annotations

from typing import Any

import numpy as np

from augserve.workload.trace import Trace, TraceRequest

CALL_PERCENTILES = (5, 25, 50, 75, 95, 99)


def _summary(requests: list[TraceRequest]) -> dict[str, Any]:
    calls = [s for r in requests for s in r.segments if s.call_time is not None]
    times = np.asarray([s.call_time for s in calls], dtype=float)
    n_calls = np.asarray([r.num_calls for r in requests], dtype=float)
    row: dict[str, Any] = {
        "requests": len(requests),
        "calls": len(calls),
        "calls_per_request_mean": float(n_calls.mean()) if requests else 0.0,
        "calls_per_request_max": int(n_calls.max()) if requests else 0,
        "prompt_len_median": float(np.median([r.prompt_len for r in requests])),
        "prompt_len_mean": float(np.mean([r.prompt_len for r in requests])),
        "output_len_mean": float(np.mean([r.output_len for r in requests])),
        "output_per_segment_median": float(
            np.median([s.output_len for r in requests for s in r.segments])
        ),
    }
    if len(times):
        row["call_time_mean"] = float(times.mean())
        for p in CALL_PERCENTILES:
            row[f"call_time_p{p}"] = float(np.percentile(times, p))
        row["call_time_median"] = row["call_time_p50"]
        row["call_share_under_1ms"] = float((times < 1e-3).mean())
        row["call_share_over_20s"] = float((times > 20.0).mean())
        row["returned_len_median"] = float(np.median([s.return_len for s in calls]))
        row["zero_time_calls"] = int((times == 0).sum())
    return row


def trace_stats(trace: Trace) -> dict[str, Any]:
    """Whole-trace summary plus one summary per kind under `"by_kind"`."""
    if len(trace) == 0:
        raise ValueError(f"trace {trace.name!r} is empty")
    requests = list(trace)
    by_kind: dict[str, list[TraceRequest]] = {}
    for r in requests:
        by_kind.setdefault(r.kind or "none", []).append(r)
    stats = {"name": trace.name, **_summary(requests)}
    stats["by_kind"] = {k: _summary(v) for k, v in sorted(by_kind.items())}
    return stats


def format_stats(stats: dict[str, Any]) -> str:
    """Human-readable text of `trace_stats`."""
    lines = [f"trace {stats['name']}"]
    lines += [f"  {k}: {_fmt(v)}" for k, v in stats.items() if k not in ("name", "by_kind")]
    for kind, row in stats["by_kind"].items():
        lines.append(f"kind {kind}")
        lines += [f"  {k}: {_fmt(v)}" for k, v in row.items()]
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)
