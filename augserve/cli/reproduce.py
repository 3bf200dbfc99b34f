"""`augserve reproduce`: every experiment of the paper's evaluation in the simulator,
written as one report (Markdown, PNG figures, CSV) beside the paper's numbers.

    augserve reproduce                      # the full run (about an hour on 2 idle cores)
    augserve reproduce --quick              # fewer points, shorter windows (minutes)
    augserve reproduce --only e2e,ablation  # some sections (the report keeps the others)
    augserve reproduce --ray auto           # the points as Ray tasks on a running cluster

Each finished point is saved under OUT/points/, so running the same command
again resumes (a change to the scheduler or simulator source recomputes).
Ctrl-C stops the run, writes the report of what finished and exits with 130;
a second Ctrl-C exits at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from augserve.cli import EXIT_INTERRUPTED, HelpFormatter, paths
from augserve.cli import args as argtypes


def _section_names() -> list[str]:
    from augserve.bench.reproduce import sections

    return [s.name for s in sections()]


def add_parser(subparsers: Any) -> None:
    names = _section_names()
    p = subparsers.add_parser(
        "reproduce",
        help="regenerate the paper's evaluation in the simulator, as one report",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--quick", action="store_true", help="fewer points and shorter windows (minutes)"
    )
    p.add_argument(
        "--only",
        type=argtypes.name_list(lambda: names, "section"),
        default=None,
        metavar="S,S",
        help=f"run only these sections, from: {', '.join(names)} (default: all)",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="working folder: points/ (the cache), model/ (the learned predictor) "
        "(default: runs/reproduce, or runs/reproduce-quick with --quick)",
    )
    p.add_argument(
        "--report-dir",
        default=None,
        metavar="DIR",
        help="where report.md, fig/ and results.csv go (default: OUT)",
    )
    p.add_argument(
        "--workers",
        type=argtypes.positive_int,
        default=None,
        metavar="N",
        help=f"local worker processes (default: the CPU count, here {os.cpu_count()}); with "
        "--ray local, the CPUs of the Ray instance",
    )
    p.add_argument(
        "--ray",
        default=None,
        metavar="ADDRESS",
        help="run the points as Ray tasks: 'auto' or HOST:PORT joins a running cluster, "
        "'local' starts one here (needs the ray extra: pip install 'augserve[ray]')",
    )
    p.add_argument("--fresh", action="store_true", help="recompute points found in OUT/points/")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from augserve.bench.reproduce import sections
    from augserve.bench.reproduce.plan import Context
    from augserve.bench.reproduce.spec import SCALES
    from augserve.profiles import list_profiles

    scale = SCALES["quick" if args.quick else "full"]
    out = paths.out_dir("--out", args.out or f"runs/reproduce{'-quick' if args.quick else ''}")
    report_dir = paths.out_dir("--report-dir", args.report_dir) if args.report_dir else out
    ctx = Context(scale, Path(out), Path(report_dir), tuple(list_profiles()))
    every = sections()
    chosen = [s for s in every if args.only is None or s.name in args.only]
    if any(s.prepare is not None for s in chosen):  # trains the learned predictor
        argtypes.require_extra("predictor", "sklearn")
    workers = args.workers or os.cpu_count() or 1
    t0, cpu0 = time.perf_counter(), _cpu_s()
    ray_started = False
    if args.ray:  # join or start the cluster before any work: a bad address fails first
        from augserve.bench.ray_pool import connect

        ray_started = connect(args.ray, workers)
    try:
        return _run(args, ctx, every, chosen, workers, t0, cpu0)
    finally:
        if ray_started:
            import ray

            ray.shutdown()


def _run(
    args: argparse.Namespace,
    ctx: Any,
    every: list[Any],
    chosen: list[Any],
    workers: int,
    t0: float,
    cpu0: float,
) -> int:
    from augserve.bench.cache import PointCache
    from augserve.bench.pool import interrupt_guard
    from augserve.bench.reproduce.execute import cached_rows, run_sections, section_points
    from augserve.bench.reproduce.report import write_report

    with interrupt_guard():
        state = run_sections(ctx, chosen, workers, args.ray, not args.no_progress, args.fresh)
        if state.interrupted:
            print(
                f"\nreproduce: interrupted: {state.reused + state.computed} of {state.wanted} "
                "points finished; writing the report of those (Ctrl-C again quits at once)",
                file=sys.stderr,
                flush=True,
            )
        rows = cached_rows(PointCache(ctx.out, code=True), section_points(ctx, every))
        rows.update(state.rows)
        command = _command(args)
        path = write_report(
            ctx,
            every,
            [s.name for s in chosen],
            rows,
            state,
            command,
            (time.perf_counter() - t0, _cpu_s() - cpu0),
        )
    print(
        f"report: {path}\nwall time: {time.perf_counter() - t0:.1f} s, CPU time "
        f"{_cpu_s() - cpu0:.1f} s (this process and its worker processes)"
    )
    if state.interrupted:
        print("reproduce: rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


def _cpu_s() -> float:
    """User + system CPU seconds of this process and its reaped children (the workers)."""
    import resource

    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _command(args: argparse.Namespace) -> str:
    """The command line that makes this run (from the parsed options)."""
    parts = ["augserve reproduce"]
    if args.quick:
        parts.append("--quick")
    if args.only:
        parts.append(f"--only {','.join(args.only)}")
    for flag, value in (
        ("--out", args.out),
        ("--report-dir", args.report_dir),
        ("--workers", args.workers),
        ("--ray", args.ray),
    ):
        if value is not None:
            parts.append(f"{flag} {value}")
    return " ".join(parts)
