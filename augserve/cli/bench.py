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

from augserve.bench.pool import hold_interrupt, interrupt_guard, run_points
from augserve.bench.report import TABLE, format_table, write_sweep
from augserve.bench.runner import (
    BenchPoint,
    Row,
    default_trace_path,
    expand_points,
)
from augserve.cli import EXIT_INTERRUPTED, paths
from augserve.cli.bench_args import bench_parser

__all__ = ["TABLE", "add_parser", "format_table", "points_from_args", "run"]


def add_parser(subparsers: Any) -> None:
    bench_parser(subparsers, __doc__).set_defaults(func=run)


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
            raise ValueError(f"--trace: {paths.one_line(exc)}") from None
    elif args.workload is not None:
        try:
            make_workload(args.workload, 4, args.seed)
        except (ValueError, OSError) as exc:
            raise ValueError(f"--workload: {paths.one_line(exc, ('workload: ',))}") from None


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
    out = paths.out_dir("--out", args.out)
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
        # a first Ctrl-C is held out of the whole callback: a point is recorded and saved
        # (no temporary file left behind) or not at all, and matplotlib's import (done
        # here, while the workers compute, so that an interrupted run plots at once) is
        # never left half done
        with hold_interrupt():
            done[todo[j]] = rows
            cache.put(points[todo[j]], rows)
            prepare_plotting()

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
