"""`augserve predictor train|eval`: fit the learned predictor on a trace, score it.

    augserve predictor train --trace FILE --out DIR [--seed 0] [--test-frac 0.2]
    augserve predictor eval --trace FILE --model DIR [--model DIR2 ...] [--json OUT]

`train` holds out a seeded fraction of the requests (whole requests) and fits on
the rest; the split is recorded in the manifest, and `eval` re-derives it from
there, so it scores only requests the model has not seen.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from augserve.cli import HelpFormatter, paths
from augserve.cli import args as argtypes


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "predictor",
        help="train / evaluate the learned predictor",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    sub = p.add_subparsers(dest="predictor_command", required=True, metavar="COMMAND")

    t = sub.add_parser(
        "train", help="fit the learned predictor on a trace", formatter_class=HelpFormatter
    )
    t.add_argument(
        "--trace",
        required=True,
        type=paths.trace_file,
        metavar="FILE",
        help="trace file (.jsonl ours, else INFERCEPT JSON), e.g. "
        "augserve/data/infercept/merged_exp_uniform.json",
    )
    t.add_argument("--out", required=True, metavar="DIR", help="model directory to write")
    t.add_argument("--seed", type=int, default=0, help="split seed (default: %(default)s)")
    t.add_argument(
        "--test-frac",
        type=_fraction,
        default=0.2,
        metavar="F",
        help="fraction of requests held out for eval, in [0, 1); 0: train on all "
        "(default: %(default)s)",
    )
    t.add_argument(
        "--split",
        choices=("group", "request"),
        default="group",
        help="group: twins (same prompt length and segment lengths) stay on one side, so "
        "no held-out request has a twin in training; request: request by request "
        "(default: %(default)s)",
    )
    t.add_argument("--no-embed", action="store_true", help="metadata features only (no MiniLM)")
    t.add_argument(
        "--max-seq-len",
        type=argtypes.positive_int,
        default=128,
        metavar="N",
        help="word pieces of prompt text the embedding reads (default: %(default)s)",
    )
    t.add_argument(
        "--use-kind",
        action="store_true",
        help="one-hot augmentation kind (live requests must carry `kind`)",
    )
    t.set_defaults(func=_train)

    e = sub.add_parser(
        "eval",
        help="score models on the held-out requests of a trace",
        formatter_class=HelpFormatter,
    )
    e.add_argument(
        "--trace",
        required=True,
        type=paths.trace_file,
        metavar="FILE",
        help="the trace the models were trained on",
    )
    e.add_argument(
        "--model",
        required=True,
        action="append",
        type=argtypes.predictor_dir,
        metavar="DIR",
        help="model directory written by `predictor train` (repeatable)",
    )
    e.add_argument("--json", metavar="FILE", help="also write the report as JSON here")
    e.set_defaults(func=_eval)


def _fraction(text: str) -> float:
    value = argtypes.nonneg_float(text)
    if value >= 1.0:
        raise argtypes.Bad(f"{text!r} must be in [0, 1)")
    return value


def _train(args: argparse.Namespace) -> int:
    from augserve.predict.evaluate import split_by_request
    from augserve.predict.learned import LearnedConfig
    from augserve.predict.train import train_learned_predictor
    from augserve.workload.registry import load_trace

    paths.out_dir("--out", args.out)
    trace: list[Any] = list(_load("--trace", args.trace, load_trace))
    if args.test_frac > 0:
        train, test = split_by_request(trace, args.test_frac, args.seed, by=args.split)
    else:
        train, test = trace, []
    cfg = LearnedConfig(
        embed=not args.no_embed,
        use_kind=args.use_kind,
        seed=args.seed,
        max_seq_length=args.max_seq_len,
    )
    info = {
        "trace": str(args.trace),
        "split_seed": args.seed,
        "test_frac": args.test_frac,
        "split": args.split,
        "held_out_requests": len(test),
    }
    pred = train_learned_predictor(train, cfg, info=info)
    out = pred.save(args.out)
    emb = pred.manifest["features"]["embedding"]
    print(
        f"trained on {len(train)} requests ({pred.manifest['training']['segments']} segments), "
        f"held out {len(test)}; embedding: {emb['model'] if emb else 'none'}; wrote {out}"
    )
    return 0


def _eval(args: argparse.Namespace) -> int:
    from augserve.predict.evaluate import (
        evaluate,
        format_report,
        measure_latency,
        split_by_request,
        twin_ids,
    )
    from augserve.predict.learned import load_learned_predictor
    from augserve.workload.registry import load_trace

    if args.json is not None:
        paths.out_file("--json", args.json)
    models = {Path(d).name: _load("--model", d, load_learned_predictor) for d in args.model}
    first = next(iter(models.values())).manifest
    seed, frac = first["training"].get("split_seed"), first["training"].get("test_frac")
    by = first["training"].get("split", "request")  # models trained before issue 28
    if not frac:
        raise ValueError(f"{args.model[0]}: trained on the whole trace; nothing is held out")
    for name, m in models.items():
        tr = m.manifest["training"]
        if (tr.get("split_seed"), tr.get("test_frac"), tr.get("split", "request")) != (
            seed,
            frac,
            by,
        ):
            raise ValueError(f"model {name}: different train/test split from {args.model[0]}")
    trace = list(_load("--trace", args.trace, load_trace))
    train, test = split_by_request(trace, frac, seed, by=by)
    report = evaluate(models, train, test)
    latency = {name: measure_latency(m, test) for name, m in models.items()}
    print(
        f"held-out: {len(test)} requests of {len(trace)} (seed {seed}, test-frac {frac}, "
        f"split by {by}; {len(twin_ids(train, test))} with a twin in training)"
    )
    print(format_report(report))
    print(
        f"\nlatency (ms per request; cpus={os.cpu_count()}, load avg "
        f"{_loadavg()}, {platform.processor() or platform.machine()}):"
    )
    for name, lat in latency.items():
        print(f"  {name}: " + ", ".join(f"{k}={v:.2f}" for k, v in lat.items()))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "report": report,
                    "latency_ms": latency,
                    "split": {"seed": seed, "test_frac": frac, "by": by},
                    "argv": sys.argv,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


def _load(flag: str, path: str, loader: Any) -> Any:
    try:
        return loader(path)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{flag}: {paths.one_line(exc)}") from None


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"
