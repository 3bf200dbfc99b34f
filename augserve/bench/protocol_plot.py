"""The figure of a comparison under the protocol (docs/benchmarking.md).

Two panels over the rate, one line per system: SLO attainment and goodput, each the
mean of the repeats with its 95% interval as an error bar and every repeat as a dot
beside it. The attainment panel draws the 90% line the capacity is read at, and the
legend gives each system's capacity with its interval (or where it is censored).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

PANELS = (("attainment", "SLO attainment"), ("goodput", "goodput (req/s)"))
CAPACITY_LEVEL = 0.9


def _capacity_text(cap: Mapping[str, Any] | None) -> str:
    if not cap:
        return ""
    censored = cap.get("censored")
    if censored in ("below", "above"):
        return f"capacity {censored} the grid"
    iv = cap.get("interval") or {}
    text = f"capacity {float(cap['rate']):.2f}/s"
    if iv.get("low") is not None and iv.get("high") is not None:
        text += f" [{float(iv['low']):.2f}, {float(iv['high']):.2f}]"
    elif censored:
        text += " (a repeat censored)"
    return text


def series(result: Mapping[str, Any], engine: str, key: str) -> dict[str, list[Any]]:
    """One system's points of one panel: rates, means, interval half-widths below and
    above (None where there is no interval) and each repeat's value."""
    cells = sorted((c for c in result["cells"] if c["engine"] == engine), key=lambda c: c["rate"])
    out: dict[str, list[Any]] = {"rate": [], "mean": [], "low": [], "high": [], "repeats": []}
    for c in cells:
        iv = c[f"{key}_interval"]
        out["rate"].append(float(c["rate"]))
        out["mean"].append(float(iv["mean"]))
        out["low"].append(None if iv.get("low") is None else float(iv["low"]))
        out["high"].append(None if iv.get("high") is None else float(iv["high"]))
        out["repeats"].append([float(v) for v in c[key]])
    return out


def protocol_figure(result: Mapping[str, Any], title: str | None = None) -> Any:
    """The two panels of `result` (a protocol result file's payload)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    engines = list(dict.fromkeys(str(c["engine"]) for c in result["cells"]))
    caps = result.get("capacity") or {}
    fig, axes = plt.subplots(1, len(PANELS), figsize=(10.0, 3.8))
    for ax, (key, label) in zip(axes, PANELS, strict=True):
        for i, engine in enumerate(engines):
            s = series(result, engine, key)
            shift = (i - (len(engines) - 1) / 2) * 0.03 * max(s["rate"] or [1.0])
            xs = [x + shift for x in s["rate"]]
            lo = [0.0 if v is None else m - v for m, v in zip(s["mean"], s["low"], strict=True)]
            hi = [0.0 if v is None else v - m for m, v in zip(s["mean"], s["high"], strict=True)]
            cap = _capacity_text(caps.get(engine))
            name = engine if key != "attainment" else f"{engine}: {cap}"
            bars = ax.errorbar(xs, s["mean"], yerr=[lo, hi], marker="o", capsize=3, label=name)
            for x, reps in zip(xs, s["repeats"], strict=True):
                ax.scatter([x] * len(reps), reps, s=10, alpha=0.5, color=bars.lines[0].get_color())
        if key == "attainment":
            ax.axhline(CAPACITY_LEVEL, color="black", linestyle="--", linewidth=1)
            ax.set_ylim(-0.05, 1.1)
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(label)
        ax.set_title("higher is better; bars: 95% interval, dots: repeats", fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower left" if key == "attainment" else "upper left")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.subplots_adjust(left=0.07, right=0.99, bottom=0.14, top=0.84, wspace=0.25)
    return fig


def plot_protocol(result: Mapping[str, Any], path: str | Path, title: str | None = None) -> Path:
    """`protocol_figure` saved as `path` (PNG). Returns the path."""
    import matplotlib.pyplot as plt

    fig = protocol_figure(result, title)
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
