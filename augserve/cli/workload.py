"""`augserve workload stats TRACE` and `augserve workload gen ...`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from augserve.cli import HelpFormatter, paths
from augserve.cli import args as argtypes
from augserve.workload.jsonl import write_jsonl
from augserve.workload.registry import WORKLOAD_NAMES, load_trace, make_workload
from augserve.workload.stats import format_stats, trace_stats


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "workload", help="inspect and generate workloads", formatter_class=HelpFormatter
    )
    sub = parser.add_subparsers(dest="workload_command", required=True, metavar="COMMAND")

    stats = sub.add_parser(
        "stats",
        help="statistics of a trace file (.json INFERCEPT, .jsonl)",
        formatter_class=HelpFormatter,
    )
    stats.add_argument("trace", help="trace file, or a workload name with --num")
    stats.add_argument(
        "--num",
        type=argtypes.int_arg(0),
        default=0,
        help="treat TRACE as a workload name and draw this many requests (default: %(default)s,"
        " read TRACE as a file)",
    )
    stats.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    stats.add_argument("--json", action="store_true", help="print JSON instead of text")
    stats.set_defaults(func=_stats)

    gen = sub.add_parser(
        "gen", help="generate a workload as a JSONL trace", formatter_class=HelpFormatter
    )
    gen.add_argument(
        "--workload",
        required=True,
        metavar="NAME",
        help="one of: " + ", ".join(WORKLOAD_NAMES),
    )
    gen.add_argument("--num", type=argtypes.positive_int, required=True, help="number of requests")
    gen.add_argument("--seed", type=int, default=0, help="(default: %(default)s)")
    gen.add_argument("--out", required=True, metavar="FILE", help="output .jsonl file")
    gen.set_defaults(func=_gen)


def _stats(args: argparse.Namespace) -> int:
    if args.num:
        trace = _workload("TRACE", args.trace, args.num, args.seed)
    else:
        try:
            paths.trace_file(args.trace)
            trace = load_trace(args.trace)
        except (argparse.ArgumentTypeError, ValueError, OSError) as exc:
            raise ValueError(f"TRACE: {paths.one_line(exc)}") from None
    stats = trace_stats(trace)
    print(json.dumps(stats, indent=2) if args.json else format_stats(stats))
    return 0


def _gen(args: argparse.Namespace) -> int:
    paths.out_file("--out", args.out)
    trace = _workload("--workload", args.workload, args.num, args.seed)
    write_jsonl(args.out, trace)
    print(f"wrote {len(trace)} requests to {args.out}")
    return 0


def _workload(flag: str, name: str, num: int, seed: int) -> Any:
    try:
        return make_workload(name, num, seed)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{flag}: {paths.one_line(exc, ('workload: ',))}") from None
