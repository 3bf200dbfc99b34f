"""The report's figures: every axis labelled with its unit, a legend, the SLO drawn
where one applies, one colour per policy across all figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from augserve.bench.reproduce.spec import POLICIES

Row = Mapping[str, Any]
XY = Sequence[tuple[float, float]]

_COLORS = ("#7f7f7f", "#1f77b4", "#2ca02c", "#17becf", "#9467bd", "#d62728", "#ff7f0e")


def color(name: str) -> str:
    """A fixed colour per policy (others cycle through the rest)."""
    if name in POLICIES:
        return _COLORS[POLICIES.index(name)]
    return _COLORS[hash(name) % len(_COLORS)]


@dataclass(frozen=True)
class Metric:
    """A panel: row key, axis label with unit, log scale, and an SLO line (row key of the
    threshold, or a number) to draw."""

    key: str
    label: str
    log: bool = False
    slo: str | float | None = None
    slo_label: str = "SLO"


GOODPUT = Metric("goodput", "goodput (req/s)")
TTFT = Metric("ttft_mean", "mean TTFT (s)", True, "ttft_slo", "SLO: TTFT < 1 s")
NL = Metric(
    "norm_latency_mean", "mean normalized latency (s/token)", True, "norm_latency_slo", "s/token"
)
TTFT95 = Metric("ttft_p95", "P95 TTFT (s)", True, "ttft_slo", "SLO: TTFT < 1 s")
NL95 = Metric(
    "norm_latency_p95", "P95 normalized latency (s/token)", True, "norm_latency_slo", "s/token"
)
ATTAIN = Metric("slo_attainment", "SLO attainment (%)", False, 0.9, "90%")
LONGQ = Metric("long_quartile_finished_share", "longest quartile finished (%)")


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    _plt().close(fig)
    return path


def _slo_line(ax: Any, metric: Metric, rows: Sequence[Row]) -> None:
    value = metric.slo
    if isinstance(value, str):
        value = next((r.get(value) for r in rows if r.get(value)), None)
    if value is None:
        return
    scale = 100.0 if metric.key in ("slo_attainment",) else 1.0
    ax.axhline(float(value) * scale, color="black", linestyle="--", linewidth=1, label=None)
    label = metric.slo_label
    if label in ("SLO", "s/token"):
        label = f"SLO: {float(value):.3g}" + (" s/token" if label == "s/token" else "")
    ax.annotate(
        label,
        (0.01, float(value) * scale),
        xycoords=("axes fraction", "data"),
        fontsize=7,
        va="bottom",
    )


def sweep_grid(
    groups: Sequence[tuple[str, Sequence[Row]]],
    metrics: Sequence[Metric],
    path: Path,
    title: str,
    series_key: str = "policy",
    x_key: str = "rate",
    x_label: str = "request rate (req/s)",
) -> Path:
    """Rows of panels (one per group), a column per metric, a line per series."""
    plt = _plt()
    fig, axes = plt.subplots(
        len(groups),
        len(metrics),
        figsize=(3.9 * len(metrics), 2.7 * len(groups) + 0.9),
        squeeze=False,
        layout="constrained",
    )
    for i, (label, rows) in enumerate(groups):
        series = list(dict.fromkeys(str(r[series_key]) for r in rows))
        for j, metric in enumerate(metrics):
            ax = axes[i][j]
            pct = 100.0 if metric.key in ("slo_attainment", "long_quartile_finished_share") else 1.0
            for name in series:
                pts = sorted(
                    (float(r[x_key]), float(r[metric.key]) * pct)
                    for r in rows
                    if str(r[series_key]) == name and r.get(metric.key) is not None
                )
                if metric.log:
                    pts = [p for p in pts if p[1] > 0]
                if pts:
                    ax.plot(
                        *zip(*pts, strict=True), marker="o", ms=3, color=color(name), label=name
                    )
            _slo_line(ax, metric, rows)
            if metric.log and ax.has_data():
                ax.set_yscale("log")
            ax.set_xlabel(x_label, fontsize=8)
            ax.set_ylabel(metric.label, fontsize=8)
            ax.set_title(label, fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=max(1, len(labels)), fontsize=8)
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def lines(
    series: Mapping[str, XY],
    path: Path,
    title: str,
    x_label: str,
    y_label: str,
    paper: Mapping[str, XY] | None = None,
    log_y: bool = False,
    x_ticks: Sequence[tuple[float, str]] | None = None,
    markers: Mapping[str, XY] | None = None,
) -> Path:
    """One panel: a line per series (ours, solid), the paper's as dashed lines, single
    points (`markers`) as stars. A linear y axis starts at 0."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    for name, pts in series.items():
        if pts:
            ax.plot(
                *zip(*pts, strict=True),
                marker="o",
                ms=4,
                label=f"{name} (ours)",
                color=color(name.split(" ")[0]) if name.split(" ")[0] in POLICIES else None,
            )
    for name, pts in (paper or {}).items():
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="x", linestyle="--", label=f"{name} (paper)")
    for name, pts in (markers or {}).items():
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="*", ms=11, linestyle="none", label=name)
    if x_ticks:
        ax.set_xticks([t for t, _ in x_ticks], [s for _, s in x_ticks])
    if log_y:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def stacked_bars(
    bars: Mapping[str, Mapping[str, float]], path: Path, title: str, y_label: str
) -> Path:
    """A stacked bar per key of `bars` ({bar: {component: value}})."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    names = list(bars)
    parts = list(dict.fromkeys(k for b in bars.values() for k in b))
    bottoms = [0.0] * len(names)
    for part in parts:
        values = [bars[n].get(part, 0.0) for n in names]
        ax.bar(names, values, bottom=bottoms, label=part)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    ax.set_ylabel(y_label)
    ax.set_xlabel("policy")
    ax.set_title(title, fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def occupancy(series: Mapping[str, Mapping[str, XY]], path: Path, title: str, x_label: str) -> Path:
    """Device and host KV occupancy (%) over iterations, a line per policy."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 3.6))
    for ax, (key, label) in zip(
        axes,
        (("device", "device (GPU) KV occupancy (%)"), ("host", "host (CPU) KV occupancy (%)")),
        strict=True,
    ):
        for name, by_kind in series.items():
            pts = by_kind.get(key) or []
            if pts:
                ax.plot(*zip(*pts, strict=True), linewidth=1, color=color(name), label=name)
        ax.set_xlabel(x_label)
        ax.set_ylabel(label)
        ax.set_ylim(0, 105)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def grouped_bars(
    groups: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    path: Path,
    title: str,
    x_label: str,
    y_label: str,
    log_y: bool = False,
) -> Path:
    """Bars side by side: one group per x label, one bar per series (None: no bar);
    series named `... (paper)` are hatched."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    width = 0.8 / max(1, len(series))
    for k, (name, values) in enumerate(series.items()):
        xs = [i + k * width for i, v in enumerate(values) if v is not None]
        ys = [v for v in values if v is not None]
        base = name.split(" ")[0]
        ax.bar(
            xs,
            ys,
            width,
            label=name,
            color=color(base) if base in POLICIES else None,
            hatch="//" if "paper" in name else None,
            alpha=0.6 if "paper" in name else 1.0,
        )
    ax.set_xticks([i + width * (len(series) - 1) / 2 for i in range(len(groups))], list(groups))
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)
