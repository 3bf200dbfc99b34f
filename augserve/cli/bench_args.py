"""The options of `augserve bench` (its behaviour: `augserve.cli.bench`)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from augserve.bench.report import table_legend
from augserve.bench.runner import BACKENDS
from augserve.cli import HelpFormatter, paths
from augserve.cli import args as argtypes

DEFAULT_POLICIES = "vllm,infercept,ssjf,mars,augserve"
DEFAULT_RATES = "2,3,4,5,6"
DEFAULT_WINDOW = 450.0
DEFAULT_PROFILE = "opt-13b-h800"
DEFAULT_OUT = "runs/bench"


def bench_parser(subparsers: Any, description: str | None) -> argparse.ArgumentParser:
    """The `bench` subparser with every option (the caller sets its `func`)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="compare scheduling policies over a rate sweep (simulator or engine)",
        description=description,
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
        type=paths.trace_file,
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
    return p
