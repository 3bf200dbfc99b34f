"""`augserve bench`: policies side by side over a rate sweep; table, JSON, CSV, plot.

With no arguments it runs the default experiment: the INFERCEPT trace on the
OPT-13B/H800 profile, all five policies, a handful of Poisson rates, a window
short enough to finish in a few minutes on two cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from augserve.bench.runner import (
    BACKENDS,
    BenchPoint,
    aggregate,
    default_trace_path,
    expand_points,
    run_points,
)

DEFAULT_POLICIES = "vllm,infercept,ssjf,mars,augserve"
DEFAULT_RATES = "2,3,4,5,6"
DEFAULT_WINDOW = 900.0
DEFAULT_PROFILE = "opt-13b-h800"
DEFAULT_OUT = "runs/bench"

# (column, header, format)
TABLE = (
    ("policy", "policy", "{}"),
    ("rate", "rate", "{:g}"),
    ("goodput", "goodput", "{:.3f}"),
    ("slo_attainment", "SLO", "{:.3f}"),
    ("throughput_rps", "thru", "{:.3f}"),
    ("ttft_mean", "TTFT", "{:.3f}"),
    ("ttft_p95", "TTFT95", "{:.3f}"),
    ("ttft_p99", "TTFT99", "{:.3f}"),
    ("norm_latency_mean", "NL", "{:.4f}"),
    ("norm_latency_p95", "NL95", "{:.4f}"),
    ("finished_share", "fin", "{:.3f}"),
    ("long_quartile_finished_share", "longQ", "{:.3f}"),
    ("long_quartile_latency_p99", "longQ99", "{:.1f}"),
    ("sched_ms_per_iter", "sched_ms", "{:.3f}"),
)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench",
        help="compare scheduling policies over a rate sweep (simulator or engine)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--backend", default="sim", help=f"one of: {', '.join(BACKENDS)}")
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--trace",
        help="trace file (.json INFERCEPT or .jsonl), resampled "
        "uniformly with replacement (default: the INFERCEPT trace)",
    )
    src.add_argument("--workload", help="a workload name (see `augserve workload gen`)")
    p.add_argument("--policies", default=DEFAULT_POLICIES, help="comma-separated policies")
    p.add_argument("--rates", default=DEFAULT_RATES, help="comma-separated rates (req/s)")
    p.add_argument("--arrival", default="poisson", help="poisson | gamma:CV")
    p.add_argument("--profile", default=DEFAULT_PROFILE, help="profile name or JSON file")
    p.add_argument(
        "--window",
        type=float,
        default=DEFAULT_WINDOW,
        help="arrival and measurement window, seconds",
    )
    p.add_argument(
        "--drain",
        type=float,
        default=0.0,
        help="keep serving this many seconds after arrivals stop",
    )
    p.add_argument("--seed", type=int, default=0, help="first seed")
    p.add_argument("--seeds", type=int, default=1, help="number of seeds (averaged)")
    p.add_argument("--predictor", default="oracle", help="oracle | noisy:P | learned:DIR")
    p.add_argument("--beta", type=float, default=None, help="AugServe's beta (per ms)")
    p.add_argument(
        "--max-batch-tokens",
        type=int,
        default=None,
        help="static token budget T_max (default: the profile's)",
    )
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other SchedulerConfig field, e.g. beta_high=1.0 or "
        "dynamic_budget=false (repeatable)",
    )
    eng = p.add_argument_group("engine backend (--backend engine)")
    eng.add_argument("--model", help="model directory (Hugging Face format) for the engine")
    eng.add_argument("--dtype", help="bf16 (default on CPU), fp16 or fp32")
    eng.add_argument("--device", help="cpu or cuda (default: cuda if available)")
    eng.add_argument("--threads", type=int, help="torch CPU threads")
    eng.add_argument(
        "--time-scale",
        type=float,
        help="multiply arrival times, call durations and the window (engine runs in real time)",
    )
    p.add_argument("--workers", type=int, default=None, help="processes (default: CPU count)")
    p.add_argument("--out", default=DEFAULT_OUT, help="output directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _csv(text: str, kind: type, name: str) -> list[Any]:
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{name}: bad list {text!r}") from None
    if not values:
        raise ValueError(f"--{name}: empty list")
    return values


def points_from_args(args: argparse.Namespace) -> list[BenchPoint]:
    trace = args.trace
    if trace is None and args.workload is None:
        trace = str(default_trace_path())
        if not Path(trace).is_file():
            raise FileNotFoundError(f"INFERCEPT trace not found at {trace}; pass --trace FILE")
    base = BenchPoint(
        policy="augserve",
        rate=1.0,
        backend=args.backend,
        trace=trace,
        workload=args.workload,
        arrival=args.arrival,
        profile=args.profile,
        window=args.window,
        drain=args.drain,
        predictor=args.predictor,
        beta=args.beta,
        max_batch_tokens=args.max_batch_tokens,
        block_size=args.block_size,
        overrides=tuple(_pair(x) for x in args.set),
    )
    policies = _csv(args.policies, str, "policies")
    rates = _csv(args.rates, float, "rates")
    if args.seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    seeds = list(range(args.seed, args.seed + args.seeds))
    return expand_points(base, policies, rates, seeds)


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--set: want KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    header = [h for _, h, _ in TABLE]
    body = []
    for row in rows:
        cells = []
        for key, _, fmt in TABLE:
            v = row.get(key)
            cells.append("-" if v is None else fmt.format(v))
        body.append(cells)
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) for cells in body]
    return "\n".join(lines)


def _engine_env(args: argparse.Namespace) -> None:
    """Hand the engine options to the backend (worker processes inherit them)."""
    if args.model is None and "AUGSERVE_ENGINE_MODEL" not in os.environ:
        raise ValueError("--backend engine needs --model DIR")
    for option, var in (
        ("model", "MODEL"),
        ("dtype", "DTYPE"),
        ("device", "DEVICE"),
        ("threads", "THREADS"),
        ("time_scale", "TIME_SCALE"),
    ):
        value = getattr(args, option)
        if value is not None:
            os.environ[f"AUGSERVE_ENGINE_{var}"] = str(value)


def run(args: argparse.Namespace) -> int:
    from augserve.bench.plots import plot_sweep
    from augserve.bench.report import write_csv, write_json

    points = points_from_args(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workers = args.workers or os.cpu_count() or 1
    if args.backend == "engine":
        _engine_env(args)
        workers = 1  # real-time runs must not share the CPU with each other
    p0 = points[0]
    print(
        f"bench: {len(points)} points ({args.backend}), trace={p0.trace or p0.workload}, "
        f"profile={p0.profile}, window={p0.window:g}s, drain={p0.drain:g}s, "
        f"arrival={p0.arrival}, predictor={p0.predictor}, workers={workers}",
        file=sys.stderr,
    )
    t0 = time.perf_counter()
    raw = run_points(points, workers=workers, progress=not args.no_progress)
    rows = aggregate(raw)
    wall = time.perf_counter() - t0
    meta = {
        "command": "augserve bench " + " ".join(sys.argv[2:]),
        "base": asdict(p0),
        "wall_s": wall,
    }
    if rows:
        meta["norm_latency_slo"] = rows[0].get("norm_latency_slo")
        meta["ttft_slo"] = rows[0].get("ttft_slo")
    write_json(out / "results.json", rows, **meta)
    write_csv(out / "results.csv", rows)
    write_json(out / "points.json", raw, **meta)
    title = f"{p0.profile}, {Path(p0.trace).name if p0.trace else p0.workload}, {p0.arrival}"
    plot = plot_sweep(rows, out / "bench.png", title=title)
    print(format_table(rows))
    slo = rows[0].get("norm_latency_slo") if rows else None
    print(
        f"\nSLO: TTFT < {rows[0].get('ttft_slo') if rows else '-'} s, normalized latency "
        f"< {slo:.4f} s/token"
        if slo
        else ""
    )
    print(
        f"table: {out / 'results.csv'}\nresults: {out / 'results.json'} "
        f"(per seed: {out / 'points.json'})\nplot: {plot}\nwall time: {wall:.1f} s"
    )
    return 0
