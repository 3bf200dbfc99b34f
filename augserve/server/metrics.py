"""`GET /metrics`: Prometheus text from one registry per server.

Engine state is read at scrape time from `AsyncLLMEngine.stats()` (requests
waiting, running, paused by context policy, swapped; device and host KV blocks;
the token budget). Finished requests feed the TTFT and normalized-latency
histograms and the finished / SLO-met counters (definitions: `augserve.core.metrics`);
tool calls feed the per-tool counters and duration histogram; the predictor's
per-tool call-time prediction and the latency model's source come from
`predictions.PredictionCollector`; the process's resident memory from /proc/self/statm;
where a streamed request's time to its first token goes, stage by stage, and the
event loop's lag from `stages.py`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from augserve.core.metrics import SLOConfig, request_metrics
from augserve.core.request import Request
from augserve.server.predictions import PredictionCollector
from augserve.server.registered_tool import ToolOutcome
from augserve.server.stages import StageMetrics

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
NORM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
TOOL_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
POLICIES = ("preserve", "swap", "discard")


def resident_memory_bytes() -> int:
    """This process's resident set size (Linux /proc/self/statm; 0 where there is none)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _MemoryCollector:
    """`augserve_resident_memory_bytes`: the server process's RSS (weights, KV, runtime)."""

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "augserve_resident_memory_bytes",
            "Resident memory of the server process (model weights, KV cache, runtime)",
            value=resident_memory_bytes(),
        )


class _EngineCollector:
    """Gauges read from the engine's scheduler at scrape time."""

    def __init__(self, stats: Callable[[], Any]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        s = self.stats()
        if s is None:
            return
        reqs = GaugeMetricFamily("augserve_num_requests", "Requests by state", labels=["state"])
        reqs.add_metric(["waiting"], s.num_waiting)
        reqs.add_metric(["running"], s.num_running)
        reqs.add_metric(["paused"], sum(s.num_paused.values()))
        reqs.add_metric(["swapped"], s.num_swapped)
        yield reqs
        paused = GaugeMetricFamily(
            "augserve_num_requests_paused",
            "Requests paused in a tool call, by context policy",
            labels=["context_policy"],
        )
        for p in POLICIES:
            paused.add_metric([p], s.num_paused.get(p, 0))
        yield paused
        yield GaugeMetricFamily(
            "augserve_num_sessions_paused",
            "Client sessions paused after tool_calls, waiting for their next turn",
            value=getattr(s, "num_sessions", 0),
        )
        yield GaugeMetricFamily(
            "augserve_num_requests_swapped", "Requests with KV blocks on the host", s.num_swapped
        )
        used = GaugeMetricFamily("augserve_kv_blocks_used", "KV blocks in use", labels=["location"])
        used.add_metric(["device"], s.device_blocks_used)
        used.add_metric(["host"], s.host_blocks_used)
        yield used
        total = GaugeMetricFamily("augserve_kv_blocks_total", "KV blocks", labels=["location"])
        total.add_metric(["device"], s.device_blocks_total)
        total.add_metric(["host"], s.host_blocks_total)
        yield total
        yield GaugeMetricFamily(
            "augserve_token_budget", "The last iteration's token budget", s.token_budget
        )
        yield from _prefix_cache_metrics(s)
        yield from _preemption_metrics(s)


def _preemption_metrics(s: Any) -> Iterator[Metric]:
    """KV taken under memory pressure: a thrash shows as these climbing faster than the
    tokens served (`sched/progress.py`)."""
    taken = CounterMetricFamily(
        "augserve_preemptions",
        "KV taken under memory pressure: recompute (a runnable request preempted), "
        "displace (a preserved paused request evicted)",
        labels=["reason"],
    )
    for reason, n in sorted(getattr(s, "preemptions", {}).items()):
        taken.add_metric([reason], n)
    yield taken
    yield CounterMetricFamily(
        "augserve_recomputed_tokens",
        "Computed tokens whose KV preemption threw away (computed again later)",
        getattr(s, "recomputed_tokens", 0),
    )


def _prefix_cache_metrics(s: Any) -> Iterator[Metric]:
    """vLLM's prefix-cache counters (tokens queried and hit at admission) and their rate."""
    yield CounterMetricFamily(
        "augserve_prefix_cache_queries",
        "Prompt and context tokens looked up in the prefix cache",
        s.prefix_cache_queries,
    )
    yield CounterMetricFamily(
        "augserve_prefix_cache_hits", "Tokens found in the prefix cache", s.prefix_cache_hits
    )
    rate = s.prefix_cache_hits / s.prefix_cache_queries if s.prefix_cache_queries else 0.0
    yield GaugeMetricFamily(
        "augserve_prefix_cache_hit_rate", "Prefix cache hits over queries, in tokens", rate
    )
    yield GaugeMetricFamily(
        "augserve_kv_blocks_cached",
        "Free device KV blocks holding cached KV",
        s.device_blocks_cached,
    )


class ServerMetrics:
    def __init__(
        self,
        stats: Callable[[], Any],
        slo: SLOConfig,
        predictor: Any = None,
        latency_source: str | Callable[[], str] = "default",
        pace: Callable[[], float] | None = None,
    ) -> None:
        self.slo = slo
        self.registry = CollectorRegistry()
        self.registry.register(_EngineCollector(stats))
        self.registry.register(_MemoryCollector())
        self.registry.register(PredictionCollector(predictor, latency_source, pace))
        r = self.registry
        self.ttft = Histogram(
            "augserve_time_to_first_token_seconds",
            "Time to first token",
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.norm_latency = Histogram(
            "augserve_normalized_latency_seconds_per_token",
            "(finish - arrival - time in tool calls) / generated tokens",
            buckets=NORM_BUCKETS,
            registry=r,
        )
        self.finished = Counter(
            "augserve_requests_finished", "Finished requests", ["finish_reason"], registry=r
        )
        self.slo_met = Counter(
            "augserve_requests_slo_met", "Finished requests that met the SLO", registry=r
        )
        self.tool_calls = Counter(
            "augserve_tool_calls", "Server-side tool calls", ["tool"], registry=r
        )
        self.tool_errors = Counter(
            "augserve_tool_errors",
            "Tool calls that ended in an error",
            ["tool", "kind"],
            registry=r,
        )
        self.tool_duration = Histogram(
            "augserve_tool_call_duration_seconds",
            "Server-side tool call duration",
            ["tool"],
            buckets=TOOL_BUCKETS,
            registry=r,
        )
        self.stages = StageMetrics(r)  # where the time to a first token goes
        self.client_tool_calls = Counter(
            "augserve_client_tool_calls", "Tool calls handed back to the client", registry=r
        )

    def observe_finished(self, req: Request | None, finish_reason: str | None) -> None:
        self.finished.labels(finish_reason or "unknown").inc()
        if req is None or finish_reason in ("abort", "error"):
            return
        m = request_metrics(req, self.slo)
        ttft = m.ttft
        if ttft is None and req.first_token_time is not None:
            ttft = req.first_token_time - req.arrival_time
        norm = m.norm_latency
        if norm is None and req.finish_time is not None:
            norm = (req.finish_time - req.arrival_time - m.call_time) / max(
                1, req.num_generated_tokens
            )
        if ttft is not None:
            self.ttft.observe(max(0.0, ttft))
        if norm is not None:
            self.norm_latency.observe(max(0.0, norm))
        if (
            ttft is not None
            and norm is not None
            and ttft < self.slo.ttft_slo
            and norm < self.slo.norm_latency_slo
        ):
            self.slo_met.inc()

    def observe_tool(self, out: ToolOutcome) -> None:
        # names the model made up must not become label values
        name = out.name if out.error not in ("unknown_tool", "invalid_call") else "<unknown>"
        self.tool_calls.labels(name).inc()
        self.tool_duration.labels(name).observe(max(0.0, out.duration))
        if out.error is not None:
            self.tool_errors.labels(name, out.error).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
