"""Serving metrics (docs/paper.md section 7), computed from `Request` records. Pure.

Definitions:

- A request *counts* if it arrived inside the window [start, end]. It is
  *finished* if it ended normally (`FINISHED_STOPPED` / `FINISHED_LENGTH`)
  with `finish_time <= end`. Aborted, errored and still-running requests are
  *unfinished*: they never meet the SLO and are left out of every latency
  statistic (their count is reported).
- TTFT = first_token_time - arrival_time.
- Normalized latency = (finish - arrival - sum of call durations) /
  generated tokens (returned tool tokens are not generated; at least 1).
- SLO met: finished, TTFT < ttft_slo and normalized latency < norm_latency_slo.
- SLO attainment = met / counted. Goodput = met / window seconds.
- Throughput = finished / window seconds, and generated tokens of finished
  requests / window seconds.
- Breakdown (means over finished): queueing = first_scheduled - arrival;
  execution = exec_time (iterations in the batch); external call = call
  durations; other = latency - the three (waiting to be rescheduled, swaps).
- Long quartile: the 25% of counted requests with the most planned generated
  tokens (sum of their segments' output_len; num_generated_tokens when a
  request has no plan); we report the share of them that finished and the
  p99 of their end-to-end latency (finished only).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from augserve.core.request import Request, RequestStatus

_OK = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH)


NORM_FACTOR = 10.0  # the paper's normalized-latency SLO in decode iterations at batch 1


@dataclass(frozen=True)
class SLOConfig:
    """SLO thresholds: TTFT in seconds, normalized latency in seconds per token.

    The one SLO type: the metrics judge by it, `augserve-slo` triages by it
    (`augserve/sched/slo.py`), the benchmarks build theirs with `from_iteration_time`
    (docs/paper.md section 7).
    """

    norm_latency_slo: float
    ttft_slo: float = 1.0

    def __post_init__(self) -> None:
        if not self.norm_latency_slo > 0:
            raise ValueError(f"SLOConfig.norm_latency_slo must be > 0, got {self.norm_latency_slo}")
        if not self.ttft_slo > 0:
            raise ValueError(f"SLOConfig.ttft_slo must be > 0, got {self.ttft_slo}")

    @classmethod
    def from_iteration_time(cls, iteration_time: float, ttft_slo: float = 1.0) -> SLOConfig:
        """The paper's SLO: normalized latency < NORM_FACTOR (10) x one decode iteration."""
        return cls(norm_latency_slo=NORM_FACTOR * iteration_time, ttft_slo=ttft_slo)


@dataclass(frozen=True)
class RequestMetrics:
    """One request's numbers; latency fields are None when it did not finish."""

    request_id: str
    arrival_time: float
    finished: bool
    met_slo: bool
    ttft: float | None
    norm_latency: float | None
    latency: float | None
    queueing: float | None
    execution: float
    call_time: float
    generated_tokens: int
    planned_tokens: int


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation (numpy's default)."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def request_metrics(req: Request, slo: SLOConfig, end: float = math.inf) -> RequestMetrics:
    """Per-request metrics; `end` is the window end (later finishes are unfinished)."""
    finished = req.status in _OK and req.finish_time is not None and req.finish_time <= end
    planned = sum(s.output_len for s in req.segments) or req.num_generated_tokens
    call_time = req.call_time_total
    ttft = norm = latency = queueing = None
    if finished and req.finish_time is not None:
        latency = req.finish_time - req.arrival_time
        norm = (latency - call_time) / max(1, req.num_generated_tokens)
        if req.first_token_time is not None:
            ttft = req.first_token_time - req.arrival_time
        if req.first_scheduled_time is not None:
            queueing = req.first_scheduled_time - req.arrival_time
    met = (
        ttft is not None
        and norm is not None
        and ttft < slo.ttft_slo
        and norm < slo.norm_latency_slo
    )
    return RequestMetrics(
        req.request_id,
        req.arrival_time,
        finished,
        met,
        ttft,
        norm,
        latency,
        queueing,
        req.exec_time,
        call_time,
        req.num_generated_tokens,
        planned,
    )


@dataclass(frozen=True)
class MetricsSummary:
    """Aggregates over the requests that arrived in [window_start, window_end]."""

    window_start: float
    window_end: float
    ttft_slo: float
    norm_latency_slo: float
    num_requests: int
    num_finished: int
    num_unfinished: int
    num_met_slo: int
    finished_share: float
    slo_attainment: float
    goodput: float  # requests/s that finished in the window and met the SLO
    throughput_rps: float
    throughput_tps: float  # generated tokens/s of finished requests
    ttft_mean: float | None
    ttft_p50: float | None
    ttft_p95: float | None
    ttft_p99: float | None
    norm_latency_mean: float | None
    norm_latency_p50: float | None
    norm_latency_p95: float | None
    norm_latency_p99: float | None
    latency_mean: float | None
    latency_p99: float | None
    queueing_mean: float | None
    execution_mean: float | None
    call_time_mean: float | None
    other_mean: float | None
    long_quartile_requests: int
    long_quartile_finished_share: float
    long_quartile_latency_p99: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _window(reqs: Sequence[Request], start: float | None, end: float | None) -> tuple[float, float]:
    lo = start if start is not None else min((r.arrival_time for r in reqs), default=0.0)
    if end is None:
        ends = [r.finish_time for r in reqs if r.finish_time is not None]
        ends += [r.arrival_time for r in reqs]
        end = max(ends, default=lo)
    if end < lo:
        raise ValueError(f"window end ({end}) must be >= start ({lo})")
    return lo, end


def _stats(prefix: str, values: Sequence[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {f"{prefix}_mean": _mean(values)}
    for q in (50, 95, 99):
        out[f"{prefix}_p{q}"] = percentile(values, q)
    return out


def _breakdown(done: Sequence[RequestMetrics]) -> dict[str, float | None]:
    queue = [m.queueing for m in done if m.queueing is not None]
    other = [(m.latency or 0.0) - (m.queueing or 0.0) - m.execution - m.call_time for m in done]
    return {
        "queueing_mean": _mean(queue),
        "execution_mean": _mean([m.execution for m in done]),
        "call_time_mean": _mean([m.call_time for m in done]),
        "other_mean": _mean(other),
    }


def _long_quartile(rows: Sequence[RequestMetrics]) -> dict[str, Any]:
    k = math.ceil(len(rows) / 4)
    longest = sorted(rows, key=lambda m: (-m.planned_tokens, m.arrival_time))[:k]
    lat = [m.latency for m in longest if m.latency is not None]
    return {
        "long_quartile_requests": k,
        "long_quartile_finished_share": (len(lat) / k) if k else 0.0,
        "long_quartile_latency_p99": percentile(lat, 99),
    }


def compute_metrics(
    requests: Iterable[Request],
    slo: SLOConfig,
    start: float | None = None,
    end: float | None = None,
) -> MetricsSummary:
    """Summarize `requests` over the window [start, end] (defaults: first arrival,
    last finish or arrival). Requests arriving outside the window are ignored."""
    reqs = list(requests)
    lo, hi = _window(reqs, start, end)
    rows = [request_metrics(r, slo, hi) for r in reqs if lo <= r.arrival_time <= hi]
    done = [m for m in rows if m.finished]
    met = sum(1 for m in rows if m.met_slo)
    span = hi - lo
    n = len(rows)
    fields: dict[str, Any] = {
        "window_start": lo,
        "window_end": hi,
        "ttft_slo": slo.ttft_slo,
        "norm_latency_slo": slo.norm_latency_slo,
        "num_requests": n,
        "num_finished": len(done),
        "num_unfinished": n - len(done),
        "num_met_slo": met,
        "finished_share": len(done) / n if n else 0.0,
        "slo_attainment": met / n if n else 0.0,
        "goodput": met / span if span > 0 else 0.0,
        "throughput_rps": len(done) / span if span > 0 else 0.0,
        "throughput_tps": sum(m.generated_tokens for m in done) / span if span > 0 else 0.0,
    }
    fields.update(_stats("ttft", [m.ttft for m in done if m.ttft is not None]))
    fields.update(
        _stats("norm_latency", [m.norm_latency for m in done if m.norm_latency is not None])
    )
    latencies = [m.latency for m in done if m.latency is not None]
    fields["latency_mean"] = _mean(latencies)
    fields["latency_p99"] = percentile(latencies, 99)
    fields.update(_breakdown(done))
    fields.update(_long_quartile(rows))
    return MetricsSummary(**fields)


def max_rate_at_attainment(
    rows: Iterable[Mapping[str, Any]],
    target: float = 0.9,
    rate_key: str = "rate",
    attainment_key: str = "slo_attainment",
) -> float | None:
    """The highest `rate` in a sweep whose SLO attainment is >= `target` (None if none)."""
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"target must be in [0, 1], got {target}")
    ok = [float(r[rate_key]) for r in rows if float(r[attainment_key]) >= target]
    return max(ok) if ok else None
