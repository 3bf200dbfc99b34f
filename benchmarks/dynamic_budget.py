"""The dynamic token budget, measured (docs/results-budget.md, issue 28).

    nice -n 10 python benchmarks/dynamic_budget.py [--window 1800] [--rates 3,4,5]
                                                   [--workers 2] [--out docs/budget]

On both OPT-13B/H800 profiles (roofline `opt-13b-h800`, calibrated
`opt-13b-h800-paper`), the INFERCEPT trace, Poisson arrivals, oracle predictor,
seed 0, no drain (the reproduce report's ablation setting):

- `infercept` (the paper's Base) with a static budget T of 100, 500, 1000,
  1500 and 2000 tokens, and beside each the dynamic budget referenced to the
  same T (+B: `dynamic_budget=true`, beta_low 0.5, beta_high 1.0 as shipped);
- +B referenced to the profile's T_max (1500) with beta_high = 2.0 (up to 3000
  tokens: the range the paper leaves open);
- `augserve` with its static (+S) and dynamic (AugServe) budget at T_max.

Every point also counts, per iteration, whether the dynamic budget differed
from T and whether the batch filled the budget (`augserve/bench/budget_probe.py`):
a dynamic budget can change a decision only where it differs and binds.

Writes OUT/dynamic-budget.csv (one row per point, the command and commit in
OUT/dynamic-budget.meta.json) and OUT/dynamic-budget.md (the tables).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from augserve.bench.budget_probe import BudgetProbe
from augserve.bench.pool import run_points
from augserve.bench.report import git_commit
from augserve.bench.runner import BenchPoint, Row, default_trace_path, sim_point_row

PROFILES = ("opt-13b-h800", "opt-13b-h800-paper")
RATES = (3.0, 4.0, 5.0)
BUDGETS = (100, 500, 1000, 1500, 2000)
T_MAX = 1500  # both profiles' max_batch_tokens
WINDOW = 1800.0
ROOT = Path(__file__).resolve().parent.parent
BACKEND = "__main__:run_point"  # worker processes are forked from this script
PAPER = {"Base": 0.15, "+B": 0.21, "+S": 0.93, "AugServe": 1.07}  # table 2, 3 req/s
# Table 1 (4 req/s, OPT-13B/H800): INFERCEPT's goodput by static budget
PAPER_TABLE1 = {100: 0.01, 500: 0.16, 1000: 0.18, 1500: 0.22, 2000: 0.19}
COLUMNS = (
    "profile", "rate", "label", "policy", "budget", "dynamic", "overrides", "goodput",
    "slo_attainment", "ttft_mean", "num_finished", "iterations", "budget_below",
    "budget_above", "budget_differ_share", "budget_mean_gap", "budget_min", "budget_filled",
    "budget_filled_below", "budget_filled_static", "discards", "swapped_blocks", "live_max",
    "live_mean",
)  # fmt: skip


def run_point(point: BenchPoint) -> list[Row]:
    """The simulator backend with the budget probe's columns."""
    return [sim_point_row(replace(point, backend="sim"), BudgetProbe())]


def settings(
    budgets: Sequence[int] = BUDGETS,
) -> list[tuple[str, str, int, tuple[tuple[str, str], ...]]]:
    """(label, policy, T, overrides), in table order."""
    out = []
    for b in budgets:
        out.append((f"Base T={b}", "infercept", b, (("dynamic_budget", "false"),)))
        out.append((f"+B T={b}", "infercept", b, (("dynamic_budget", "true"),)))
    two = (("dynamic_budget", "true"), ("beta_high", "2.0"))
    out.append((f"+B T={T_MAX}, beta_high 2", "infercept", T_MAX, two))
    out.append(("+S", "augserve", T_MAX, (("dynamic_budget", "false"),)))
    out.append(("AugServe", "augserve", T_MAX, (("dynamic_budget", "true"),)))
    return out


def points(
    window: float, rates: Sequence[float], profiles: Sequence[str], budgets: Sequence[int]
) -> list[BenchPoint]:
    trace = str(default_trace_path())
    return [
        BenchPoint(
            policy,
            rate,
            backend=BACKEND,
            trace=trace,
            profile=prof,
            window=window,
            max_batch_tokens=budget,
            overrides=over,
        )  # fmt: skip
        for prof in profiles
        for rate in rates
        for _, policy, budget, over in settings(budgets)
    ]


def label_of(row: Row) -> str:
    for label, policy, budget, over in settings():
        tag = ",".join(f"{k}={v}" for k, v in over)
        if (row["policy"], row["max_batch_tokens"], row["overrides"]) == (policy, budget, tag):
            return label
    raise ValueError(f"no setting for row {row['policy']} {row['overrides']}")


def _log(pts: Sequence[BenchPoint]) -> Any:
    def log(i: int, rows: list[Row]) -> None:
        r, p = rows[0], pts[i]
        print(
            f"  {p.profile} {p.rate:g} {label_of(r)}: goodput {r['goodput']:.3f}, budget "
            f"below T in {r['budget_below']} of {r['iterations']} iterations",
            flush=True,
        )

    return log


def csv_rows(rows: Sequence[Row]) -> list[Row]:
    out = []
    for r in rows:
        r = dict(r)
        r["label"], r["budget"] = label_of(r), r["max_batch_tokens"]
        r["dynamic"] = "dynamic_budget=true" in r["overrides"]
        out.append({k: r.get(k) for k in COLUMNS})
    return out


# --- tables ---------------------------------------------------------------------------
def _f(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None or v == "" else format(float(v), spec)


def _gain(new: float, base: float) -> str:
    """+x% of new over base; below a floor of 0.05 req/s the counts decide, not a ratio."""
    if base < 0.05:
        return "(base < 0.05)"
    return f"{100 * (new / base - 1):+.1f}%"


def budget_table(rows: Sequence[Row], prof: str, rate: float) -> str:
    by = {r["label"]: r for r in rows if r["profile"] == prof and float(r["rate"]) == rate}
    head = "| T | Base goodput | +B goodput | +B over Base | iterations | dynamic < T | "
    head += "mean gap (tokens) | min budget | filled below T | Base filled T |"
    lines = [head, "|" + "---:|" * 10]
    names = [(b, f"Base T={b}", f"+B T={b}") for b in BUDGETS]
    names.append((f"{T_MAX}, beta_high 2", f"Base T={T_MAX}", f"+B T={T_MAX}, beta_high 2"))
    for b, base_label, dyn_label in names:
        base, dyn = by.get(base_label), by.get(dyn_label)
        if base is None or dyn is None:
            continue
        g_base, g_dyn = float(base["goodput"]), float(dyn["goodput"])
        its, above = int(dyn["iterations"]), int(dyn["budget_above"])
        lines.append(
            f"| {b} | {g_base:.3f} | {g_dyn:.3f} | {_gain(g_dyn, g_base)} | {its} | "
            f"{int(dyn['budget_below'])}{f' (> T: {above})' if above else ''} "
            f"({100 * float(dyn['budget_differ_share']):.1f}% differ) | "
            f"{_f(dyn['budget_mean_gap'], '.0f')} | {int(dyn['budget_min'])} | "
            f"{int(dyn['budget_filled_below'])} | {int(base['budget_filled_static'])} |"
        )
    return "\n".join(lines)


def cross_table(rows: Sequence[Row], prof: str, rate: float) -> str:
    """+B at T_max over each static Base: which Base gives the paper's +41.5%."""
    by = {r["label"]: r for r in rows if r["profile"] == prof and float(r["rate"]) == rate}
    dyn = by.get(f"+B T={T_MAX}")
    two = by.get(f"+B T={T_MAX}, beta_high 2")
    if dyn is None:
        return ""
    lines = [
        f"| Base T | Base goodput | +B (T={T_MAX}) over it | +B (T={T_MAX}, beta_high 2) over it |",
        "|---:|---:|---:|---:|",
    ]
    for b in BUDGETS:
        base = by.get(f"Base T={b}")
        if base is None:
            continue
        g = float(base["goodput"])
        two_gain = _gain(float(two["goodput"]), g) if two else "-"
        lines.append(f"| {b} | {g:.3f} | {_gain(float(dyn['goodput']), g)} | {two_gain} |")
    return "\n".join(lines)


def ablation_table(rows: Sequence[Row], prof: str, rates: Sequence[float]) -> str:
    head = "| row | " + " | ".join(f"goodput @{r:g}" for r in rates) + " | paper @3 |"
    lines = [head, "|---|" + "---:|" * (len(rates) + 1)]
    named = (
        ("Base", f"Base T={T_MAX}"),
        ("+B", f"+B T={T_MAX}"),
        ("+B, beta_high 2", f"+B T={T_MAX}, beta_high 2"),
        ("+S", "+S"),
        ("AugServe", "AugServe"),
    )
    for name, label in named:
        cells = []
        for rate in rates:
            hit = [r for r in rows if r["profile"] == prof and float(r["rate"]) == rate]
            row = next((r for r in hit if r["label"] == label), None)
            cells.append(_f(row and row["goodput"]))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {PAPER.get(name, '-')} |")
    return "\n".join(lines)


def write_tables(rows: Sequence[Row], out: Path, meta: dict[str, Any]) -> None:
    rates = sorted({float(r["rate"]) for r in rows})
    profiles = [p for p in PROFILES if any(r["profile"] == p for r in rows)]
    text = [
        "# The dynamic token budget, measured",
        "",
        f"Written by `{meta['command']}` at commit `{meta['commit']}` "
        f"({meta['window']:g} s windows; data: `dynamic-budget.csv`).",
        "",
    ]
    for prof in profiles:
        text += [f"## `{prof}`", "", ablation_table(rows, prof, rates), ""]
        for rate in rates:
            text += [f"### `{prof}`, {rate:g} req/s: static T against the dynamic budget at T"]
            text += ["", budget_table(rows, prof, rate), "", cross_table(rows, prof, rate), ""]
    (out / "dynamic-budget.md").write_text("\n".join(text))


def _commit() -> str:
    return git_commit() or "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=WINDOW)
    ap.add_argument("--rates", default=",".join(f"{r:g}" for r in RATES))
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--budgets", default=",".join(map(str, BUDGETS)), help="static budgets T")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "budget")
    args = ap.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    budgets = [int(b) for b in args.budgets.split(",")]
    if T_MAX not in budgets:
        raise SystemExit(f"--budgets must include T_max = {T_MAX}")
    pts = points(args.window, rates, args.profiles.split(","), budgets)
    t0 = time.perf_counter()
    rows = csv_rows(run_points(pts, workers=args.workers, progress=False, on_result=_log(pts)))
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "dynamic-budget.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    meta = {
        "command": "python benchmarks/dynamic_budget.py " + " ".join(argv or sys.argv[1:]),
        "commit": _commit(),
        "window": args.window,
        "points": len(pts),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    (args.out / "dynamic-budget.meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    write_tables(rows, args.out, meta)
    print(f"wrote {args.out / 'dynamic-budget.md'} ({len(pts)} points, {meta['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
