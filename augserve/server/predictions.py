"""What the server predicts, wired to its tools file and shown on `/metrics` (issue 24).

`apply_tool_priors` gives the online predictor each tool's `expected_duration`
from the tools file (and the file's default as the prior of every other tool).
`PredictionCollector` exports, at scrape time, the predictor's current call-time
prediction per tool and its error, and where the scheduler's latency model came
from (`default` while a background fit runs, then `fitted`; or `cached`, `file`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from augserve.server.tool_config import ToolsConfig


def apply_tool_priors(predictor: Any, tools: ToolsConfig) -> None:
    """Seed an online predictor's call-time priors from the tools file (others: no-op)."""
    calls = getattr(predictor, "calls", None)
    if calls is None:
        return
    if tools.defaults.expected_duration is not None:
        calls.set_global_prior(tools.defaults.expected_duration)
    for spec in tools.tools:
        if spec.limits.expected_duration is not None:
            calls.set_prior(spec.name, spec.limits.expected_duration)


def engine_pace(engine: Any) -> float:
    """The engine's measured pace; 1 when it follows none (`engine/engine_pace.py`)."""
    pace = getattr(engine, "pace", None)
    return float(pace.pace) if pace is not None else 1.0


class PredictionCollector:
    """`augserve_tool_predicted_seconds{tool}` and its error; the latency model's source
    and pace."""

    def __init__(
        self,
        predictor: Any,
        latency_source: str | Callable[[], str],
        pace: Callable[[], float] | None = None,
    ) -> None:
        self.predictor = predictor
        # a callable is read at each scrape: the source changes when a background fit ends
        self.latency_source = latency_source
        self.pace = pace  # the engine's measured pace (`engine_pace.py`), read at each scrape

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "augserve_latency_profile_info",
            "Where the scheduler's latency model came from (1 for the source in use)",
            labels=["source"],
        )
        source = self.latency_source
        info.add_metric([source() if callable(source) else source], 1.0)
        yield info
        pace = GaugeMetricFamily(
            "augserve_latency_pace",
            "The latency model's scale: the engine's measured pace over its profile's "
            "(1 when not followed, --pace-window)",
        )
        pace.add_metric([], self.pace() if self.pace is not None else 1.0)
        yield pace
        calls = getattr(self.predictor, "calls", None)
        if calls is None:
            return
        names = ("predicted_seconds", "prediction_error_seconds", "prediction_log_error")
        helps = (
            "The online predictor's current call duration prediction, per tool",
            "Mean |observed - predicted| call duration (each before its update), per tool",
            "Mean |ln(observed / predicted)| call duration, per tool",
        )
        fams = [
            GaugeMetricFamily(f"augserve_tool_{n}", h, labels=["tool"])
            for n, h in zip(names, helps, strict=True)
        ]
        observed = GaugeMetricFamily(
            "augserve_tool_predictor_observations", "Calls the predictor learned from, per tool",
            labels=["tool"],
        )  # fmt: skip
        for tool, est in sorted(calls.tools().items()):
            for fam, value in zip(
                fams, (est.predicted, est.mean_abs_error, est.mean_abs_log_error), strict=True
            ):
                fam.add_metric([tool], value)
            observed.add_metric([tool], est.count)
        yield from fams
        yield observed
