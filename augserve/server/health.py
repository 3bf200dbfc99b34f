"""`GET /health` and the health gauges of `/metrics`.

/health answers 503 while the server drains (from the first signal, while the
listener is still open, so a load balancer sees it) and while the engine is
unhealthy (`AsyncLLMEngine.healthy`: failed steps in a row); otherwise 200. Each
MCP server's state (connecting, up, down, closed) is in the body; a server that is
down makes the status "degraded" but not 503: its tools answer with an error, and
everything else is served.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric


def health(state: Any) -> tuple[int, dict[str, Any]]:
    """The status code and body of /health."""
    engine = state.engine
    servers = state.registry.server_states()
    body: dict[str, Any] = {"status": "ok", "tool_servers": servers}
    if state.draining:
        body["status"] = "shutting down"
        return 503, body
    if not getattr(engine, "healthy", True):
        body["status"] = (
            f"unhealthy: {engine.failures_in_a_row} engine steps failed in a row "
            f"(last: {engine.last_failure})"
        )
        return 503, body
    if any(s != "up" for s in servers.values()):
        body["status"] = "degraded"
    return 200, body


class HealthCollector:
    """Tool servers' states and engine failures, read at scrape time."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        registry, engine = self.state.registry, self.state.engine
        up = GaugeMetricFamily(
            "augserve_tool_server_up", "1 while an MCP tool server is connected", labels=["server"]
        )
        connects = CounterMetricFamily(
            "augserve_tool_server_connects",
            "Successful connections to an MCP tool server (1 + reconnections)",
            labels=["server"],
        )
        for name, server in registry.mcp_servers.items():
            up.add_metric([name], 1.0 if server.state == "up" else 0.0)
            connects.add_metric([name], server.connects)
        yield up
        yield connects
        yield CounterMetricFamily(
            "augserve_engine_failed_steps",
            "Engine steps that raised (their batch finished with reason 'error')",
            getattr(engine, "failed_steps", 0),
        )
        yield GaugeMetricFamily(
            "augserve_engine_healthy",
            "1 unless engine steps failed several times in a row",
            1.0 if getattr(engine, "healthy", True) else 0.0,
        )
        yield GaugeMetricFamily(
            "augserve_draining",
            "1 while the server shuts down",
            1.0 if self.state.draining else 0.0,
        )
