"""`augserve bench`: policies side by side over a rate sweep; table, JSON, CSV, plot.

With no arguments it runs the default experiment: the INFERCEPT trace (shipped
in the package) on the simulated OPT-13B/H800 profile, all five policies, a
sweep of Poisson rates, a window short enough to finish in about 2 minutes on
two cores.

Each finished point is saved under OUT/points/, so running the same command
again reuses it (--fresh recomputes). Ctrl-C stops the run within about a
second, writes the table, JSON, CSV and plot of the points that finished, and
exits with status 130; a second Ctrl-C exits at once.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from augserve.bench.pool import interrupt_guard, run_points
from augserve.bench.report import TABLE, format_table, table_legend, write_sweep
from augserve.bench.runner import (
    BACKENDS,
    BenchPoint,
    Row,
    default_trace_path,
    expand_points,
)
from augserve.cli import HelpFormatter
from augserve.cli import args as argtypes

__all__ = ["TABLE", "add_parser", "format_table", "points_from_args", "run"]

DEFAULT_POLICIES = "vllm,infercept,ssjf,mars,augserve"
DEFAULT_RATES = "2,3,4,5,6"
DEFAULT_WINDOW = 450.0
DEFAULT_PROFILE = "opt-13b-h800"
DEFAULT_OUT = "runs/bench"
EXIT_INTERRUPTED = 130


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "bench",
        help="compare scheduling policies over a rate sweep (simulator or engine)",
        description=__doc__,
        formatter_class=HelpFormatter,
        epilog="table columns (also in the footnote under the printed table):\n"
        + table_legend()
        + "\nSLO: TTFT < 1 s and NL < 10 decode iterations of the profile (per token).",
    )
    p.add_argument(
        "--backend",
        default="sim",
        choices=list(BACKENDS),
        help="sim: the simulator; engine: the PyTorch engine in real time (default: %(default)s)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--trace",
        type=argtypes.trace_file,
        metavar="FILE",
        help="trace file (.json INFERCEPT or .jsonl), resampled uniformly with replacement "
        "(default: the shipped INFERCEPT trace, merged_exp_uniform.json)",
    )
    src.add_argument(
        "--workload",
        metavar="NAME",
        help="a generated workload instead of a trace: infercept-like, toolbench-like, "
        "mixed:FRACTION[:BASE], ... (see `augserve workload gen --help`)",
    )
    p.add_argument(
        "--policies",
        type=argtypes.name_list(argtypes.policy_names, "policy"),
        default=DEFAULT_POLICIES,
        metavar="P,P",
        help=f"comma-separated, from: {', '.join(argtypes.policy_names())} (default: %(default)s)",
    )
    p.add_argument(
        "--rates",
        type=argtypes.rate_list,
        default=DEFAULT_RATES,
        metavar="R,R",
        help="comma-separated arrival rates, requests/s (default: %(default)s)",
    )
    p.add_argument(
        "--arrival",
        type=argtypes.arrival_arg,
        default="poisson",
        help="arrival process: poisson or gamma:CV (default: %(default)s)",
    )
    p.add_argument(
        "--profile",
        type=argtypes.profile_arg,
        default=DEFAULT_PROFILE,
        metavar="NAME|FILE",
        help=f"latency profile: {', '.join(argtypes.profile_names())} or a profile JSON file "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--window",
        type=argtypes.positive_float,
        default=DEFAULT_WINDOW,
        metavar="S",
        help="seconds of arrivals, and the measurement window (default: %(default)g)",
    )
    p.add_argument(
        "--drain",
        type=argtypes.nonneg_float,
        default=0.0,
        metavar="S",
        help="keep serving this many seconds after arrivals stop (default: %(default)g)",
    )
    p.add_argument("--seed", type=int, default=0, help="first seed (default: %(default)s)")
    p.add_argument(
        "--seeds",
        type=argtypes.positive_int,
        default=1,
        metavar="N",
        help="number of seeds, averaged (default: %(default)s)",
    )
    p.add_argument(
        "--predictor",
        type=argtypes.predictor_arg,
        default="oracle",
        help="oracle, noisy:P (oracle times 1 +- P), learned:DIR or online (learned from "
        "the run itself, as the server does) (default: %(default)s)",
    )
    p.add_argument(
        "--beta",
        type=argtypes.nonneg_float,
        default=None,
        help="AugServe's beta, per ms (default: the scheduler's)",
    )
    p.add_argument(
        "--max-batch-tokens",
        type=argtypes.positive_int,
        default=None,
        metavar="N",
        help="static token budget T_max (default: the profile's)",
    )
    p.add_argument(
        "--block-size",
        type=argtypes.positive_int,
        default=16,
        metavar="N",
        help="KV block size, tokens (default: %(default)s)",
    )
    argtypes.add_set_option(p, "beta_high=1.0 or dynamic_budget=false")
    p.add_argument(
        "--workers",
        type=argtypes.positive_int,
        default=None,
        metavar="N",
        help=f"worker processes (default: the CPU count, here {os.cpu_count()})",
    )
    p.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="DIR",
        help="output folder: results.json, results.csv, points.json, bench.png, and "
        "points/ (finished points, reused by a rerun) (default: %(default)s)",
    )
    p.add_argument("--fresh", action="store_true", help="recompute points found in OUT/points/")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    eng = p.add_argument_group("engine backend (--backend engine)")
    eng.add_argument(
        "--model",
        metavar="MODEL",
        help="model directory (Hugging Face format), FILE.gguf or smollm2",
    )
    eng.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), help="default: bf16 on CPU")
    eng.add_argument("--device", help="cpu or cuda (default: cuda if available)")
    eng.add_argument("--threads", type=argtypes.positive_int, metavar="N", help="torch CPU threads")
    eng.add_argument(
        "--time-scale",
        type=argtypes.positive_float,
        metavar="X",
        help="multiply arrival times, call durations and the window (the engine runs in real time)",
    )
    p.set_defaults(func=run)


def points_from_args(args: argparse.Namespace) -> list[BenchPoint]:
    """The grid of points the arguments ask for (policy outermost, then rate, seed)."""
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
        overrides=tuple(args.set),
    )
    seeds = list(range(args.seed, args.seed + args.seeds))
    return expand_points(base, args.policies, args.rates, seeds)


def _check_source(args: argparse.Namespace) -> None:
    """Load the trace / make the workload once here, so a bad one fails before any work."""
    from augserve.workload.registry import load_trace, make_workload

    if args.trace is not None:
        try:
            load_trace(args.trace)
        except (ValueError, OSError) as exc:
            raise ValueError(f"--trace: {argtypes.one_line(exc)}") from None
    elif args.workload is not None:
        try:
            make_workload(args.workload, 4, args.seed)
        except (ValueError, OSError) as exc:
            raise ValueError(f"--workload: {argtypes.one_line(exc, ('workload: ',))}") from None


# SchedulerConfig fields that have their own flag; any other comes from --set
_CONFIG_FLAGS = {
    "beta": "--beta",
    "max_batch_tokens": "--max-batch-tokens",
    "block_size": "--block-size",
    "policy": "--policies",
    "predictor": "--predictor",
}


def _check_configs(points: Sequence[BenchPoint]) -> None:
    """Build each policy's scheduler config once here, so that a bad combination of
    options fails before any work, naming the flag (not the internal class)."""
    from augserve.bench.runner import point_scheduler_config
    from augserve.profiles import load_profile

    profile = load_profile(points[0].profile)
    for point in {p.policy: p for p in points}.values():
        try:
            point_scheduler_config(point, profile)
        except ValueError as exc:
            text = str(exc)
            match = re.search(r"SchedulerConfig\.(\w+)", text)
            field = match.group(1) if match else ""
            flag = _CONFIG_FLAGS.get(field, "--set")
            if flag == "--set" and field not in dict(point.overrides):
                flag = f"--block-size {point.block_size} with --profile {point.profile}"
            raise ValueError(f"{flag}: {text.replace('SchedulerConfig.', '')}") from None


def _engine_env(args: argparse.Namespace) -> None:
    """Hand the engine options to the backend (worker processes inherit them)."""
    if args.model is None and "AUGSERVE_ENGINE_MODEL" not in os.environ:
        raise ValueError("--backend engine needs --model DIR")
    if args.model is not None:
        from augserve.engine.resolve import resolve_model

        args.model = resolve_model(args.model)  # once here, not in every worker
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
    from augserve.bench.cache import PointCache
    from augserve.bench.plots import prepare_plotting

    workers = args.workers or os.cpu_count() or 1
    if args.backend == "engine":
        _engine_env(args)
        workers = 1  # real-time runs must not share the CPU with each other
    out = argtypes.out_dir("--out", args.out)
    points = points_from_args(args)
    _check_configs(points)
    _check_source(args)
    cache = PointCache(out)
    done: dict[int, list[Row]] = {}
    if not args.fresh:
        for i, point in enumerate(points):
            rows = cache.get(point)
            if rows is not None:
                done[i] = rows
    todo = [i for i in range(len(points)) if i not in done]
    _print_start(args, points, workers, len(done), cache.dir)
    t0 = time.perf_counter()

    def finished(j: int, rows: list[Row]) -> None:
        done[todo[j]] = rows
        cache.put(points[todo[j]], rows)
        prepare_plotting()  # while the workers compute, so that an interrupted run plots at once

    with interrupt_guard():
        try:
            run_points(
                [points[i] for i in todo],
                workers=workers,
                progress=not args.no_progress,
                on_result=finished,
            )
        except KeyboardInterrupt:
            for i, rows in done.items():  # one Ctrl-C may have cut a save short
                if cache.get(points[i]) is None:
                    cache.put(points[i], rows)
            print(
                f"\nbench: interrupted: {len(done)} of {len(points)} points finished; writing "
                "them (Ctrl-C again quits at once)",
                file=sys.stderr,
                flush=True,
            )
            _write(out, points, done, time.perf_counter() - t0)
            print(
                f"bench: rerun the same command to resume ({len(points) - len(done)} points left)",
                file=sys.stderr,
            )
            return EXIT_INTERRUPTED
        _write(out, points, done, time.perf_counter() - t0)
    return 0


def _print_start(
    args: argparse.Namespace, points: Sequence[BenchPoint], workers: int, reused: int, where: Path
) -> None:
    p0 = points[0]
    print(
        f"bench: {len(points)} points ({args.backend}), trace={p0.trace or p0.workload}, "
        f"profile={p0.profile}, window={p0.window:g}s, drain={p0.drain:g}s, "
        f"arrival={p0.arrival}, predictor={p0.predictor}, workers={workers}",
        file=sys.stderr,
    )
    if reused:
        print(
            f"bench: reusing {reused} of {len(points)} points finished before ({where}; "
            "--fresh recomputes them)",
            file=sys.stderr,
        )


def _write(
    out: Path, points: Sequence[BenchPoint], done: dict[int, list[Row]], wall: float
) -> None:
    raw = [row for i in sorted(done) for row in done[i]]
    command = "augserve bench " + " ".join(sys.argv[2:])
    write_sweep(out, points[0], raw, (len(done), len(points)), wall, command)
