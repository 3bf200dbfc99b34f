"""Paper figure 8: AugServe under prediction error (oracle, noisy:P, learned).

    python benchmarks/fig8_predictor.py runs/fig8 [--png docs/img/fig8-predictor.png]
                                                 [--sets heldout,full]

Reads every `results.json` under the given directory (one `augserve bench`
run per predictor; the first directory level below it, e.g. `heldout/` or
`full/`, names the trace set), prints one markdown table per set (goodput,
its change against the oracle, SLO attainment, TTFT and normalized latency
means, simulation wall time) and plots goodput, TTFT and normalized latency
against the injected error level, one line per rate, with the learned
predictor as a separate marker at the right.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Row = dict[str, Any]

PANELS = (
    ("goodput", "goodput (req/s)"),
    ("ttft_mean", "mean TTFT (s)"),
    ("norm_latency_mean", "mean normalized latency (s/token)"),
)


def load_rows(root: str | Path) -> list[Row]:
    """Rows of every `results.json` under `root`, each with `set` (first directory level)."""
    root = Path(root)
    rows: list[Row] = []
    for path in sorted(root.rglob("results.json")):
        rel = path.relative_to(root).parts
        name = rel[0] if len(rel) > 2 else "-"
        for row in json.loads(path.read_text())["rows"]:
            rows.append({**row, "set": name})
    return rows


def noise_level(predictor: str) -> float | None:
    """oracle -> 0.0, noisy:P -> P, anything else (learned) -> None."""
    if predictor == "oracle":
        return 0.0
    kind, _, arg = predictor.partition(":")
    return float(arg) if kind == "noisy" else None


def _label(predictor: str) -> str:
    return "learned" if predictor.startswith("learned") else predictor


def _order(predictor: str) -> tuple[int, float]:
    level = noise_level(predictor)
    return (1, 0.0) if level is None else (0, level)


def table(rows: Sequence[Row]) -> str:
    """Markdown tables, one per set: a row per (predictor, rate)."""
    out: list[str] = []
    for name in dict.fromkeys(r["set"] for r in rows):
        sub = [r for r in rows if r["set"] == name]
        oracle = {r["rate"]: r["goodput"] for r in sub if r["predictor"] == "oracle"}
        trace = Path(str(sub[0].get("trace"))).name
        out.append(f"**{name}** (trace `{trace}`, window {sub[0]['window']:g} s)\n")
        out.append(
            "| predictor | rate | goodput (req/s) | vs oracle | SLO att. | TTFT mean (s) "
            "| norm. latency mean (s/tok) | finished | sim wall (s) |"
        )
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in sorted(sub, key=lambda r: (_order(r["predictor"]), r["rate"])):
            base = oracle.get(r["rate"])
            rel = f"{100 * (r['goodput'] / base - 1):+.1f}%" if base else "-"
            out.append(
                f"| {_label(r['predictor'])} | {r['rate']:g} | {r['goodput']:.3f} | {rel} "
                f"| {r['slo_attainment']:.3f} | {r['ttft_mean']:.2f} "
                f"| {r['norm_latency_mean']:.4f} | {r['num_finished']:.0f}/{r['num_requests']:.0f} "
                f"| {r.get('sim_wall_s', float('nan')):.0f} |"
            )
        out.append("")
    return "\n".join(out)


def plot(rows: Sequence[Row], path: str | Path) -> Path:
    """A row of panels per set: metric vs error level, a line per rate; learned at 'L'."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = list(dict.fromkeys(r["set"] for r in rows))
    rates = sorted({float(r["rate"]) for r in rows})
    fig, axes = plt.subplots(
        len(sets), len(PANELS), figsize=(4.3 * len(PANELS), 3.3 * len(sets)), squeeze=False
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    levels = sorted({lv for r in rows if (lv := noise_level(r["predictor"])) is not None})
    x_learned = (max(levels) if levels else 0.0) + 0.15
    for i, name in enumerate(sets):
        sub = [r for r in rows if r["set"] == name]
        for j, (key, label) in enumerate(PANELS):
            ax = axes[i][j]
            for c, rate in enumerate(rates):
                color = colors[c % len(colors)]
                at = [r for r in sub if float(r["rate"]) == rate]
                pts = sorted(
                    (lv, r[key]) for r in at if (lv := noise_level(r["predictor"])) is not None
                )
                if pts:
                    ax.plot(
                        [p[0] for p in pts],
                        [p[1] for p in pts],
                        marker="o",
                        color=color,
                        label=f"{rate:g} req/s",
                    )
                for r in at:
                    if noise_level(r["predictor"]) is None:
                        ax.plot(
                            [x_learned],
                            [r[key]],
                            marker="*",
                            markersize=12,
                            color=color,
                            linestyle="none",
                        )
            ticks = [*levels, x_learned]
            ax.set_xticks(ticks, [f"{lv:.0%}" for lv in levels] + ["learned"])
            ax.set_xlabel("injected error p (0% = oracle)")
            ax.set_ylabel(label)
            if key != "goodput":
                ax.set_yscale("log")
            ax.grid(True, alpha=0.3)
            ax.set_title(f"{name}", fontsize=9)
        axes[i][0].legend(fontsize=8)
    fig.suptitle("AugServe under prediction error (OPT-13B / H800 profile, INFERCEPT)", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python benchmarks/fig8_predictor.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("root", help="directory holding the per-predictor bench outputs")
    ap.add_argument("--png", default=None, help="plot path (default: ROOT/fig8.png)")
    ap.add_argument("--sets", default=None, help="comma-separated sets to show, in this order")
    args = ap.parse_args(argv)
    rows = load_rows(args.root)
    if args.sets:
        order = [s.strip() for s in args.sets.split(",") if s.strip()]
        rows = sorted((r for r in rows if r["set"] in order), key=lambda r: order.index(r["set"]))
    if not rows:
        print(f"no results.json under {args.root}", file=sys.stderr)
        return 1
    print(table(rows))
    png = plot(rows, args.png or Path(args.root) / "fig8.png")
    print(f"plot: {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
