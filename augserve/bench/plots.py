"""Plots of a rate sweep: goodput, TTFT and normalized latency vs rate (paper figure 7)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# (row key, axis label, log scale, which way is better, the row key of its SLO)
PANELS = (
    ("goodput", "goodput (req/s)", False, "higher is better", None),
    ("ttft_mean", "mean TTFT (s)", True, "lower is better", "ttft_slo"),
    ("norm_latency_mean", "mean normalized latency (s/token)", True, "lower is better",
     "norm_latency_slo"),
)  # fmt: skip


def prepare_plotting() -> None:
    """Import matplotlib (non-interactive backend) now rather than at the first plot.
    An import cut short (Ctrl-C lands in it) leaves no half-imported matplotlib
    behind, so that the plot of what finished imports it afresh."""
    if "matplotlib.pyplot" in sys.modules:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except BaseException:
        for name in [m for m in sys.modules if m.split(".")[0] == "matplotlib"]:
            del sys.modules[name]
        raise


def sweep_figure(rows: Sequence[Mapping[str, Any]], title: str | None = None) -> Any:
    """One panel per metric, one line per policy, rate on the x axis; each panel says
    which way is better, and the latency panels draw the SLO as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(dict.fromkeys(str(r["policy"]) for r in rows))
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.6))
    for ax, (key, label, log, better, slo_key) in zip(axes, PANELS, strict=True):
        for policy in policies:
            pts = sorted(
                (float(r["rate"]), r.get(key))
                for r in rows
                if r["policy"] == policy and r.get(key) is not None
            )
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=policy)
        slo = next((r[slo_key] for r in rows if slo_key and r.get(slo_key)), None)
        if slo is not None:
            style = {"color": "black", "linestyle": "--", "linewidth": 1}
            ax.axhline(float(slo), label="SLO (per request)", **style)
            ax.legend(handles=ax.get_lines()[-1:], fontsize=8, loc="upper left")
        ax.set_title(better, fontsize=9)
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(label)
        if log and any(r.get(key) for r in rows):
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    # fixed margins: tight_layout would draw the figure twice (slow on a busy CPU)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.15, top=0.82, wspace=0.3)
    return fig


def plot_sweep(
    rows: Sequence[Mapping[str, Any]], path: str | Path, title: str | None = None
) -> Path:
    """`sweep_figure` saved as `path`. Returns the path."""
    import matplotlib.pyplot as plt

    fig = sweep_figure(rows, title)
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
