"""The learned predictor's accuracy without leakage (docs/results-predictor.md, issue 28).

    nice -n 10 python benchmarks/predictor_split.py [--folds 5] [--out docs/predictor]
                                                    [--no-embed-only]

On the INFERCEPT trace (`merged_exp_uniform.json`, 397 requests). Twins are
requests with the same prompt length and, segment by segment, the same output
and returned lengths (`augserve.predict.evaluate.plan_key`).

- request split (seed 0, 20% held out): the split used before issue 28; the
  held-out requests scored all together, with a twin in training, and without;
- group split (seed 0, 20%): twins kept on one side (no held-out request has a
  twin in training): the split `augserve predictor train` now uses;
- group k-fold: every request held out once, twins in the same fold; the
  metrics pooled over the folds' held-out segments.

Each with the shipped model (MiniLM embedding + metadata, gradient-boosted
heads) and with metadata only (`--no-embed`). Writes OUT/split.json (every
figure, the command and the commit) and OUT/split.md (the table).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from augserve.bench.report import git_commit
from augserve.bench.runner import default_trace_path
from augserve.predict.evaluate import (
    group_folds,
    learned_estimate,
    score,
    split_by_request,
    twin_ids,
)
from augserve.predict.features import segment_rows
from augserve.predict.learned import LearnedConfig
from augserve.predict.train import train_learned_predictor
from augserve.workload.registry import load_trace

ROOT = Path(__file__).resolve().parent.parent
METRICS = ("segments", "bucket_acc", "bucket_pm1", "call_acc", "calls", "call_mae", "call_mse")


def _score(pred: Any, test: Sequence[Any]) -> dict[str, float]:
    rows = list(segment_rows(test))
    if not rows:
        return {}
    return score(rows, *learned_estimate(pred, rows))


def _pooled(parts: Sequence[tuple[Any, Sequence[Any]]]) -> dict[str, float]:
    """Metrics over the union of each model's held-out segments."""
    rows_all, outs, calls, times = [], [], [], []
    for pred, test in parts:
        rows = list(segment_rows(test))
        out, p_call, t = learned_estimate(pred, rows)
        rows_all += rows
        outs.append(out)
        calls.append(p_call)
        times.append(t)
    return score(rows_all, np.concatenate(outs), np.concatenate(calls), np.concatenate(times))


def run(trace: list[Any], embed: bool, folds: int) -> dict[str, Any]:
    cfg = LearnedConfig(embed=embed, seed=0)
    out: dict[str, Any] = {}
    train, test = split_by_request(trace, 0.2, 0, by="request")
    twins = twin_ids(train, test)
    pred = train_learned_predictor(train, cfg)
    out["request split"] = {
        "requests": len(test),
        "twins": len(twins),
        "all": _score(pred, test),
        "with a twin in training": _score(pred, [t for t in test if t.request_id in twins]),
        "without": _score(pred, [t for t in test if t.request_id not in twins]),
    }
    train, test = split_by_request(trace, 0.2, 0, by="group")
    assert not twin_ids(train, test)
    out["group split"] = {
        "requests": len(test),
        "twins": 0,
        "all": _score(train_learned_predictor(train, cfg), test),
    }
    parts = []
    for tr, te in group_folds(trace, folds, 0):
        assert not twin_ids(tr, te)
        parts.append((train_learned_predictor(tr, cfg), te))
    out[f"group {folds}-fold"] = {"requests": len(trace), "twins": 0, "all": _pooled(parts)}
    return out


def table(results: dict[str, Any]) -> str:
    lines = [
        "| model | split | held-out requests | subset | segments | bucket acc | +-1 bucket "
        "| call? acc | call MAE s |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for model, splits in results.items():
        for split, res in splits.items():
            for subset in ("all", "with a twin in training", "without"):
                m = res.get(subset)
                if not m:
                    continue
                n = res["twins"] if subset.startswith("with ") else None
                n = res["requests"] - res["twins"] if subset == "without" else n
                lines.append(
                    f"| {model} | {split} | {res['requests'] if n is None else n} | {subset} | "
                    f"{m['segments']:.0f} | {m['bucket_acc']:.1%} | {m['bucket_pm1']:.1%} | "
                    f"{m['call_acc']:.1%} | {m['call_mae']:.2f} |"
                )
    lines.append("| paper (fine-tuned BERT-base) | its own | | | | 65% | | | |")
    return "\n".join(lines)


def _commit() -> str:
    return git_commit() or "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "predictor")
    ap.add_argument("--no-embed-only", action="store_true", help="skip the MiniLM model")
    args = ap.parse_args(argv)
    trace = list(load_trace(str(default_trace_path())))
    t0 = time.perf_counter()
    models = [("metadata only", False)]
    if not args.no_embed_only:
        models.insert(0, ("MiniLM + metadata (shipped)", True))
    results = {name: run(trace, embed, args.folds) for name, embed in models}
    meta = {
        "command": "python benchmarks/predictor_split.py " + " ".join(argv or sys.argv[1:]),
        "commit": _commit(),
        "trace": default_trace_path().name,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "split.json").write_text(json.dumps({**meta, "results": results}, indent=1))
    text = f"Written by `{meta['command']}` at commit `{meta['commit']}`.\n\n{table(results)}\n"
    (args.out / "split.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
