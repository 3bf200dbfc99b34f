"""`augserve workload stats TRACE` and `augserve workload gen ...`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from augserve.workload.jsonl import write_jsonl
from augserve.workload.registry import WORKLOAD_NAMES, load_trace, make_workload
from augserve.workload.stats import format_stats, trace_stats


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("workload", help="inspect and generate workloads")
    sub = parser.add_subparsers(dest="workload_command", required=True)

    stats = sub.add_parser("stats", help="statistics of a trace file (.json INFERCEPT, .jsonl)")
    stats.add_argument("trace", help="trace file, or a workload name with --num")
    stats.add_argument("--num", type=int, default=0, help="treat TRACE as a workload name")
    stats.add_argument("--seed", type=int, default=0)
    stats.add_argument("--json", action="store_true", help="print JSON instead of text")
    stats.set_defaults(func=_stats)

    gen = sub.add_parser("gen", help="generate a workload as a JSONL trace")
    gen.add_argument("--workload", required=True, help="one of: " + ", ".join(WORKLOAD_NAMES))
    gen.add_argument("--num", type=int, required=True, help="number of requests")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--out", required=True, help="output .jsonl file")
    gen.set_defaults(func=_gen)


def _stats(args: argparse.Namespace) -> int:
    trace = make_workload(args.trace, args.num, args.seed) if args.num else load_trace(args.trace)
    stats = trace_stats(trace)
    print(json.dumps(stats, indent=2) if args.json else format_stats(stats))
    return 0


def _gen(args: argparse.Namespace) -> int:
    trace = make_workload(args.workload, args.num, args.seed)
    write_jsonl(args.out, trace)
    print(f"wrote {len(trace)} requests to {args.out}")
    return 0
