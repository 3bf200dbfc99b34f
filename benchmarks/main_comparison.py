"""The main comparison, its ablation and its timing (docs/results-main.md), in one run.

    python benchmarks/main_comparison.py [--parts main,ablation,timing] [--workers 2]
                                         [--out runs/main-comparison]

- main: the five paper policies and `ssjf-infercept`, Poisson rates 3-6 req/s,
  1800 s window, seed 0, oracle predictor, on the roofline profile
  (`opt-13b-h800`) and the calibrated one (`opt-13b-h800-paper`).
- ablation: on the same streams and both profiles, each change of issue 11
  reverted alone from the final defaults, for each policy it touches.
- `--predictor online` runs every point with the server's online predictor instead
  of the oracle (write it to its own `--out`, beside the oracle's tables).
- timing: the 20-point main comparison (five paper policies x rates 3-6,
  roofline) with the per-iteration sort (`incremental_ranking=false`, before)
  and with the persistent queues (after), one after the other; wall time and
  the CPU time of the worker processes; the two must give identical rows.

Writes OUT/{main,ablation,timing}.json, OUT/tables.md (the tables of
docs/results-main.md) and OUT/results-main-<profile>.png (copied to docs/img);
and the committed data behind the README's headline, DATA/{main,ablation}.csv
(one row per point, the live-request counts included) with the command and
commit in DATA/meta.json (DATA: --data, default docs/data/main-comparison).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import resource
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from augserve.bench.budget_probe import BudgetProbe
from augserve.bench.plots import plot_sweep
from augserve.bench.pool import run_points
from augserve.bench.report import git_commit
from augserve.bench.reproduce.tables import GOODPUT_FLOOR
from augserve.bench.runner import BenchPoint, Row, default_trace_path, sim_point_row

PROFILES = ("opt-13b-h800", "opt-13b-h800-paper")
RATES = (3.0, 4.0, 5.0, 6.0)
PAPER_POLICIES = ("vllm", "infercept", "ssjf", "mars", "augserve")
POLICIES = ("vllm", "vllm-apc", "infercept", "ssjf", "ssjf-infercept", "mars", "augserve")
WINDOW = 1800.0
PREDICTOR = "oracle"  # --predictor: every point's (online: learned from the run, as served)
ROOT = Path(__file__).resolve().parent.parent
BACKEND = "__main__:run_point"  # the simulator with the budget probe (worker processes fork)
CSV_COLUMNS = (
    "profile", "policy", "rate", "overrides", "window", "goodput", "num_met_slo",
    "num_offered", "slo_attainment", "ttft_mean", "ttft_p99", "norm_latency_mean",
    "norm_latency_p95", "finished_share", "iterations", "discards", "live_max", "live_mean",
    "budget_below", "sched_ms_per_iter", "sched_cpu_ms_per_iter",
)  # fmt: skip

HOST_LINK = "host-link"  # MARS's swap rate: the profile's host link, in V2's blocks per second
# change -> (policies it touches, the override that reverts it alone)
ABLATION: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]], ...] = (
    ("1. beta_high 1.0 (revert: 2.0)", ("augserve",), (("beta_high", "2.0"),)),
    ("1. cost of the remaining segment (revert: fixed per segment)", ("augserve",),
     (("segment_cost", "true"),)),
    ("3. V2 block triangle (revert: decode triangle)", ("mars",),
     (("mars_block_triangle", "false"),)),
    ("3. after = interval + returned (revert: interval)", ("mars",),
     (("mars_after_returned", "false"),)),
    ("3. swap rate 2 blocks/s (revert: the profile's host link)", ("mars",),
     (("mars_swap_rate", HOST_LINK),)),
    ("3. quantum 100,000 (revert: 10)", ("mars",), (("mars_quantum", "10"),)),
    ("3. boost ahead of waiting only (revert: of running too)", ("mars",),
     (("mars_boost_running", "true"),)),
    ("4. re-evaluated paused policy (revert: chosen once)",
     ("infercept", "ssjf-infercept", "mars", "augserve"), (("reevaluate_paused", "false"),)),
    ("1+4. AugServe before issue 11 (all three reverted)", ("augserve",),
     (("beta_high", "2.0"), ("segment_cost", "true"), ("reevaluate_paused", "false"))),
)  # fmt: skip
# Paper section 8: AugServe vs each baseline (geomean goodput ratio, TTFT, norm. latency)
PAPER = {
    "vllm": ("6.5x (fig. 7: 7.5x)", "-95.6%", "-77.8%"),
    "infercept": ("4.7x (fig. 7: 5.7x)", "-96.0%", "-72.8%"),
    "ssjf": ("1.9x (fig. 7)", "-92.5%", "-36.5%"),
    "ssjf-infercept": ("(not run)", "-", "-"),
    "mars": ("3.07x (D.6)", "-", "-"),
}


def run_point(point: BenchPoint) -> list[Row]:
    """The simulator backend, with the budget probe's columns (live-request counts too)."""
    from dataclasses import replace

    return [sim_point_row(replace(point, backend="sim"), BudgetProbe())]


def resolve(overrides: tuple[tuple[str, str], ...], profile: str) -> tuple[tuple[str, str], ...]:
    """The overrides for `profile`: HOST_LINK becomes the profile's own swap rate in V2's
    64-token blocks per second (what `mars_swap_rate=None` means; a `--set` of None
    would leave the default of 2 in place)."""
    from augserve.profiles import load_profile
    from augserve.sched.policies.mars_rank import BLOCK

    def value(v: str) -> str:
        return repr(1.0 / load_profile(profile).swap_time(BLOCK)) if v == HOST_LINK else v

    return tuple((k, value(v)) for k, v in overrides)


def points(
    policies: Iterable[str],
    profile: str,
    overrides: tuple[tuple[str, str], ...] = (),
    rates: Sequence[float] = RATES,
) -> list[BenchPoint]:
    trace = str(default_trace_path())
    overrides = resolve(overrides, profile)
    return [
        BenchPoint(
            p,
            r,
            backend=BACKEND,
            trace=trace,
            profile=profile,
            window=WINDOW,
            overrides=overrides,
            predictor=PREDICTOR,
        )  # fmt: skip
        for p in policies
        for r in rates
    ]


def _cpu_s() -> float:
    """CPU seconds of this process and its reaped children (the pool's workers)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        use = resource.getrusage(who)
        total += use.ru_utime + use.ru_stime
    return total


def timed_run(pts: Sequence[BenchPoint], workers: int) -> tuple[list[Row], float, float]:
    """Rows, wall seconds and CPU seconds (workers are reaped at the end of the run);
    each point is logged as it finishes."""

    def log(i: int, rows: list[Row]) -> None:
        r, p = rows[0], pts[i]
        tag = ",".join(f"{k}={v}" for k, v in p.overrides)
        print(
            f"  {p.profile} {p.policy} {p.rate:g} {tag}: goodput {r['goodput']:.3f}"
            f" ({r['sim_cpu_s']:.0f} s CPU)",
            flush=True,
        )

    c0, t0 = _cpu_s(), time.perf_counter()
    rows = run_points(pts, workers=workers, progress=False, on_result=log)
    return rows, time.perf_counter() - t0, _cpu_s() - c0


# --- tables ---------------------------------------------------------------------------
def _f(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _x(ratio: float | None) -> str:
    """A ratio: two decimals, two significant digits below 0.1."""
    if ratio is None:
        return "-"
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"


def _geomean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _by(rows: Iterable[Row]) -> dict[tuple[str, str, float], Row]:
    return {(r["profile"], r["policy"], float(r["rate"])): r for r in rows}


def main_table(rows: Sequence[Row], profile: str) -> str:
    out = [
        "| policy | rate | goodput | SLO att. | TTFT mean | TTFT p99 | norm. lat. mean "
        "| norm. lat. p95 | finished | sched CPU ms/iter |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    by = _by(rows)
    for p in POLICIES:
        for rate in RATES:
            r = by.get((profile, p, rate))
            if r is None:
                continue
            out.append(
                f"| {p} | {rate:g} | {_f(r['goodput'], '.3f')} | {_f(r['slo_attainment'], '.3f')}"
                f" | {_f(r['ttft_mean'], '.2f')} | {_f(r.get('ttft_p99'), '.1f')}"
                f" | {_f(r['norm_latency_mean'], '.4f')} | {_f(r.get('norm_latency_p95'), '.4f')}"
                f" | {_f(r.get('finished_share'), '.3f')}"
                f" | {_f(r.get('sched_cpu_ms_per_iter'), '.3f')} |"
            )
    return "\n".join(out)


def _ratio(mine: Sequence[float | None], base: Sequence[float | None]) -> float | None:
    return _geomean([m / b for m, b in zip(mine, base, strict=True) if m and b])


def ratio_table(rows: Sequence[Row], profile: str) -> str:
    """AugServe over each baseline: geomean over the rates of the goodput ratio (rates where
    the baseline's goodput is below GOODPUT_FLOOR left out, shown as counts), and the
    geomean TTFT / normalized-latency ratio minus 1 (the paper's "geometric mean
    reductions")."""
    by = _by(rows)
    out = [
        f"| augserve vs | goodput (geomean, baseline >= {GOODPUT_FLOOR:g} req/s) | per rate "
        "| TTFT | norm. lat. "
        "| paper: goodput | paper: TTFT | paper: norm. lat. |",
        "|---|---|---|---|---|---|---|---|",
    ]
    mine = [by[(profile, "augserve", r)] for r in RATES]
    for base in POLICIES:
        if base == "augserve":
            continue
        theirs = [by[(profile, base, r)] for r in RATES]
        # a baseline below the floor is a count, not a denominator: left out of the geomean
        kept = [(m, t) for m, t in zip(mine, theirs, strict=True) if t["goodput"] >= GOODPUT_FLOOR]
        good = _ratio([m["goodput"] for m, _ in kept], [t["goodput"] for _, t in kept])
        per = ", ".join(
            f"{r:g}: {m['goodput'] / t['goodput']:.2f}x"
            if t["goodput"] >= GOODPUT_FLOOR
            else f"{r:g}: {m['num_met_slo']} vs {t['num_met_slo']} met the SLO"
            for r, m, t in zip(RATES, mine, theirs, strict=True)
        )
        cells = []
        for key in ("ttft_mean", "norm_latency_mean"):
            g = _ratio([m[key] for m in mine], [t[key] for t in theirs])
            cells.append("-" if g is None else f"{100 * (g - 1):+.1f}%")
        paper = PAPER.get(base, ("-", "-", "-"))  # vllm-apc: not in the paper
        out.append(
            f"| {base} | {_f(good, '.2f')}x | {per} | {cells[0]} | {cells[1]} "
            f"| {paper[0]} | {paper[1]} | {paper[2]} |"
        )
    return "\n".join(out)


def ablation_table(main: Sequence[Row], ablation: Sequence[Row], profile: str) -> str:
    """Each change reverted alone, at the rates the ablation ran (a subset of RATES)."""
    by = _by(main)
    rates = sorted({float(r["rate"]) for r in ablation if r["profile"] == profile})
    out = [
        f"| change (reverted alone) | policy | goodput at {' / '.join(f'{r:g}' for r in rates)}"
        " req/s (final -> reverted) | geomean effect of the change |",
        "|---|---|---|---|",
    ]
    for label, policies, over in ABLATION:
        tag = ",".join(f"{k}={v}" for k, v in resolve(over, profile))
        rev = {
            (r["policy"], float(r["rate"])): r
            for r in ablation
            if r["profile"] == profile and r.get("overrides") == tag
        }
        for p in policies:
            ran = [rate for rate in rates if (p, rate) in rev]  # a cut-short run: "-"
            if not ran:
                continue
            final = [by[(profile, p, rate)]["goodput"] for rate in ran]
            back = [rev[(p, rate)]["goodput"] for rate in ran]
            got = {r: f"{f:.3f} -> {b:.3f}" for r, f, b in zip(ran, final, back, strict=True)}
            cells = " / ".join(got.get(rate, "-") for rate in rates)
            g = _ratio(final, back)
            out.append(f"| {label} | {p} | {cells} | {_x(g)} |")
    # change 2: ssjf (vLLM's handling) against ssjf-infercept, already in the main table
    ssjf = [by[(profile, "ssjf", r)]["goodput"] for r in rates]
    inf = [by[(profile, "ssjf-infercept", r)]["goodput"] for r in rates]
    cells = " / ".join(f"{a:.3f} -> {b:.3f}" for a, b in zip(ssjf, inf, strict=True))
    out.append(
        f"| 2. ssjf with vLLM's call handling (revert: INFERCEPT's, `ssjf-infercept`) | ssjf "
        f"| {cells} | {_x(_ratio(ssjf, inf))} |"
    )
    return "\n".join(out)


METRICS = ("goodput", "slo_attainment", "ttft_mean", "norm_latency_mean", "iterations")


def timing_table(timing: dict[str, Any]) -> str:
    b, a = timing["before"], timing["after"]
    same = all(
        x.get(m) == y.get(m) for x, y in zip(b["rows"], a["rows"], strict=True) for m in METRICS
    )
    return "\n".join(
        [
            "| ranking | points | wall s (sum) | CPU s (sum) | identical rows |",
            "|---|---|---|---|---|",
            f"| before: sort every iteration | {len(b['rows'])} | {b['wall']:.0f} "
            f"| {b['cpu']:.0f} | - |",
            f"| after: persistent queues, kinetic heap | {len(a['rows'])} | {a['wall']:.0f} "
            f"| {a['cpu']:.0f} | {'yes' if same else 'NO'} |",
            f"| after / before | | {a['wall'] / b['wall']:.2f} | {a['cpu'] / b['cpu']:.2f} | |",
            "",
            "| policy | rate | CPU s before | CPU s after | after / before "
            "| schedule() ms/iter before | after |",
            "|---|---|---|---|---|---|---|",
            *(
                f"| {x['policy']} | {float(x['rate']):g} | {x['sim_cpu_s']:.1f} "
                f"| {y['sim_cpu_s']:.1f} | {y['sim_cpu_s'] / x['sim_cpu_s']:.2f} "
                f"| {x['sched_ms_per_iter']:.3f} | {y['sched_ms_per_iter']:.3f} |"
                for x, y in zip(b["rows"], a["rows"], strict=True)
            ),
        ]
    )


def run_timing(pts: Sequence[BenchPoint], workers: int) -> dict[str, Any]:
    """Each point with the per-iteration sort (before) and the persistent queues (after),
    alternating point by point (with one worker, strictly in turn), so that both see the
    same machine; wall and CPU seconds summed from each point's own simulation."""
    pairs = [
        BenchPoint(**{**p.key(), "overrides": (("incremental_ranking", flag),)})
        for p in pts
        for flag in ("false", "true")
    ]
    rows, _, _ = timed_run(pairs, workers)
    out: dict[str, Any] = {}
    for name, part in (("before", rows[0::2]), ("after", rows[1::2])):
        wall = sum(r["sim_wall_s"] for r in part)
        cpu = sum(r["sim_cpu_s"] for r in part)
        out[name] = {"rows": part, "wall": wall, "cpu": cpu}
        print(f"timing {name}: {wall:.0f} s wall, {cpu:.0f} s CPU", flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="main,ablation,timing")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "main-comparison")
    ap.add_argument("--window", type=float, default=WINDOW, help="seconds (smoke tests)")
    ap.add_argument("--data", type=Path, default=ROOT / "docs" / "data" / "main-comparison")
    ap.add_argument(
        "--predictor",
        default=PREDICTOR,
        help="every policy's predictor: oracle (the trace's true plans) or online (learned "
        "from the run's own finished calls and segments, the server's default)",
    )
    ap.add_argument("--ablation-profiles", default=",".join(PROFILES))
    ap.add_argument("--ablation-rates", default=",".join(f"{r:g}" for r in RATES))
    ap.add_argument("--timing-rates", default=",".join(f"{r:g}" for r in RATES))
    args = ap.parse_args(argv)
    _set_window(args.window)
    _set_predictor(args.predictor)
    parts = set(args.parts.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    if "timing" in parts:
        rates = [float(r) for r in args.timing_rates.split(",")]
        timing = run_timing(points(PAPER_POLICIES, PROFILES[0], rates=rates), args.workers)
        (args.out / "timing.json").write_text(json.dumps(timing, indent=1, default=str))
    if "main" in parts:
        pts = [pt for prof in PROFILES for pt in points(POLICIES, prof)]
        rows, wall, cpu = timed_run(pts, args.workers)
        (args.out / "main.json").write_text(json.dumps(rows, indent=1, default=str))
        write_data(args.data, "main", rows, argv)
        print(f"main: {len(pts)} points, {wall:.0f} s wall, {cpu:.0f} s CPU", flush=True)
    if "ablation" in parts:
        rates = [float(r) for r in args.ablation_rates.split(",")]
        pts = [
            pt
            for prof in args.ablation_profiles.split(",")
            for _, policies, over in ABLATION
            for pt in points(policies, prof, over, rates)
        ]
        rows, wall, cpu = timed_run(pts, args.workers)
        (args.out / "ablation.json").write_text(json.dumps(rows, indent=1, default=str))
        write_data(args.data, "ablation", rows, argv)
        print(f"ablation: {len(pts)} points, {wall:.0f} s wall, {cpu:.0f} s CPU", flush=True)
    write_tables(args.out)
    return 0


def write_data(data: Path, part: str, rows: Sequence[Row], argv: Sequence[str] | None) -> None:
    """DATA/PART.csv (the committed data behind the README) and DATA/meta.json."""
    data.mkdir(parents=True, exist_ok=True)
    with (data / f"{part}.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    meta_path = data / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta[part] = {
        "command": "python benchmarks/main_comparison.py "
        + " ".join(sys.argv[1:] if argv is None else argv),
        "commit": _commit(),
        "window_s": WINDOW,
        "points": len(rows),
        "columns": "sched_ms_per_iter: wall; sched_cpu_ms_per_iter: CPU of the simulating thread",
    }
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")


def _commit() -> str:
    return git_commit() or "unknown"


def _set_predictor(spec: str) -> None:
    from augserve.predict.base import make_predictor

    make_predictor(spec)  # a bad spec fails here, before any point runs
    global PREDICTOR
    PREDICTOR = spec


def _set_window(window: float) -> None:
    global WINDOW
    WINDOW = window


def write_tables(out: Path) -> None:
    def load(name: str) -> Any:
        path = out / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else None

    main, ablation, timing = load("main"), load("ablation"), load("timing")
    text = []
    for prof in PROFILES:
        if main:
            text += [f"## {prof}", "", main_table(main, prof), "", ratio_table(main, prof), ""]
            img = out / f"results-main-{prof}.png"
            plot_sweep([r for r in main if r["profile"] == prof], img, title=prof)
        if main and ablation and any(r["profile"] == prof for r in ablation):
            text += [f"### ablation, {prof}", "", ablation_table(main, ablation, prof), ""]
    if timing:
        text += ["## timing", "", timing_table(timing), ""]
    (out / "tables.md").write_text("\n".join(text))
    print(f"wrote {out / 'tables.md'}")


if __name__ == "__main__":
    sys.exit(main())
