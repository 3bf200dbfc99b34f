"""The learned predictor: planted relations, runtime-state semantics, save/load."""

from __future__ import annotations

import numpy as np
import pytest
from predict_planted import PLANTED, history_trace, planted_trace

from augserve.core.request import CallRecord, Request
from augserve.predict.base import make_predictor
from augserve.predict.evaluate import evaluate, split_by_request
from augserve.predict.features import bucket_of, runtime_state, segment_rows
from augserve.predict.learned import LearnedConfig, LearnedPredictor, load_learned_predictor
from augserve.predict.train import train_learned_predictor

FAST = LearnedConfig(embed=False, max_iter=40, learning_rate=0.2)


def test_learns_planted_tool_relation(planted_model: LearnedPredictor) -> None:
    test = planted_trace(60, seed=2, prefix="t")
    rows = list(segment_rows(test))
    preds = planted_model.predict([r.request for r in rows])
    bucket_hits = [
        bucket_of(p.output_len, 20) == bucket_of(r.output_len, 20)
        for p, r in zip(preds, rows, strict=True)
    ]
    assert np.mean(bucket_hits) >= 0.95
    call_hits = [(p.call_time is not None) == r.has_call for p, r in zip(preds, rows, strict=True)]
    assert np.mean(call_hits) >= 0.9
    for p, r in zip(preds, rows, strict=True):
        if r.has_call and p.call_time is not None:
            secs = PLANTED[r.kind][2]  # type: ignore[index]
            assert abs(p.call_time - r.call_time) <= 0.15 * secs + 0.05


def test_learns_from_previous_call() -> None:
    train, test = history_trace(160, seed=3), history_trace(60, seed=4)
    pred = train_learned_predictor(train, FAST)
    rows = [r for r in segment_rows(test) if r.request.segment_index > 0]
    est = pred.estimate([r.request for r in rows])
    hits = np.argmax(est.bucket_proba, axis=1) == [bucket_of(r.output_len, 20) for r in rows]
    assert hits.mean() >= 0.95
    err = np.abs(est.call_time - [r.call_time for r in rows])[[r.has_call for r in rows]]
    assert np.median(err) < 1.0


def test_evaluate_beats_mean_baseline() -> None:
    trace = planted_trace(150, seed=5)
    train, test = split_by_request(trace, 0.25, seed=0)
    pred = train_learned_predictor(train, FAST)
    report = evaluate({"learned": pred}, train, test)
    assert report["learned"]["all"]["bucket_acc"] > report["mean"]["all"]["bucket_acc"] + 0.3
    assert report["learned"]["all"]["call_mae"] < report["mean"]["all"]["call_mae"] / 5
    assert set(report["learned"]) == {"all", "calc", "search", "human"}


def test_split_is_by_request_and_seeded() -> None:
    trace = planted_trace(50)
    a_train, a_test = split_by_request(trace, 0.2, seed=7)
    b_train, b_test = split_by_request(trace, 0.2, seed=7)
    assert [t.request_id for t in a_test] == [t.request_id for t in b_test]
    assert len(a_test) == 10 and len(a_train) == 40
    assert not {t.request_id for t in a_train} & {t.request_id for t in a_test}
    with pytest.raises(ValueError, match="test_frac"):
        split_by_request(trace, 1.0, seed=0)


def test_prediction_ignores_the_plan_and_counts_generated(planted_model: LearnedPredictor) -> None:
    tr = planted_trace(1, seed=9)[0]
    bare = runtime_state(tr, 1)
    with_plan = tr_request_with_plan(tr, bare)
    assert planted_model.predict([bare]) == planted_model.predict([with_plan])
    full = planted_model.predict([bare])[0].output_len
    bare.segment_generated = 10
    bare.num_generated_tokens += 10
    bare.num_tokens += 10
    part = planted_model.predict([bare])[0].output_len
    assert part == pytest.approx(max(1.0, full - 10))
    bare.segment_generated = 5000  # past every bucket: the floor of one token
    assert planted_model.predict([bare])[0].output_len == 1.0
    assert planted_model.predict([]) == []


def tr_request_with_plan(tr, bare: Request) -> Request:
    req = Request(tr.request_id, 0.0, tr.prompt_len, segments=list(tr.segments))
    req.num_tokens, req.num_generated_tokens = bare.num_tokens, bare.num_generated_tokens
    req.segment_index = bare.segment_index
    req.calls = [CallRecord(c.start, c.end, c.returned_tokens) for c in bare.calls]
    return req


def test_save_load_identical(planted_model: LearnedPredictor, tmp_path) -> None:
    planted_model.save(tmp_path / "m")
    loaded = load_learned_predictor(tmp_path / "m")
    reqs = [r.request for r in segment_rows(planted_trace(20, seed=11))]
    assert loaded.predict(reqs) == planted_model.predict(reqs)
    via_spec = make_predictor(f"learned:{tmp_path / 'm'}")
    assert via_spec.predict(reqs) == planted_model.predict(reqs)
    m = loaded.manifest
    assert m["features"]["embedding"] is None and m["features"]["version"] == 1
    assert len(m["heads"]["sha256"]) == 64


def test_missing_dir_fails_clearly(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="nope"):
        load_learned_predictor(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        load_learned_predictor(tmp_path / "empty")


def test_corrupt_dir_fails_clearly(planted_model: LearnedPredictor, tmp_path) -> None:
    d = planted_model.save(tmp_path / "m")
    heads = d / "heads.joblib"
    data = bytearray(heads.read_bytes())
    data[len(data) // 2] ^= 0xFF
    heads.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="heads.joblib.*corrupt"):
        load_learned_predictor(d)
    heads.unlink()
    with pytest.raises(FileNotFoundError, match="heads.joblib"):
        load_learned_predictor(d)
    (d / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="manifest.json"):
        load_learned_predictor(d)
    (d / "manifest.json").write_text('{"format": "something-else"}')
    with pytest.raises(ValueError, match="manifest"):
        load_learned_predictor(d)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="n_buckets"):
        LearnedConfig(n_buckets=1)
    with pytest.raises(ValueError, match="no segments"):
        train_learned_predictor([], LearnedConfig(embed=False))


def test_use_kind_reads_kind_when_present() -> None:
    # prompt length carries nothing here: only the kind tells the tools apart
    def flat(trace):  # type: ignore[no-untyped-def]
        return [type(tr)(tr.request_id, 500, tr.segments, None, tr.kind) for tr in trace]

    cfg = LearnedConfig(embed=False, use_kind=True, max_iter=40, learning_rate=0.2)
    pred = train_learned_predictor(flat(planted_trace(150, 12)), cfg)
    assert pred.manifest["features"]["kinds"] == ["calc", "human", "search"]
    rows = [r for r in segment_rows(flat(planted_trace(40, 13))) if r.request.segment_index == 0]
    est = pred.estimate([r.request for r in rows], [r.kind for r in rows])
    hits = np.argmax(est.bucket_proba, axis=1) == [bucket_of(r.output_len, 20) for r in rows]
    assert hits.mean() >= 0.95
    for r in rows:  # a live request with a `kind` attribute is read the same way
        r.request.kind = r.kind  # type: ignore[attr-defined]
    assert np.array_equal(pred.estimate([r.request for r in rows]).bucket_proba, est.bucket_proba)


def test_the_tool_of_a_starting_call_is_the_kind() -> None:
    from augserve.core.request import CallRecord, Request
    from augserve.predict.features import request_kind

    req = Request("r", 0.0, 10, kind="qa")
    assert request_kind(req) == "qa"
    req.calls.append(CallRecord(start=1.0, tool="math", args_len=12))
    assert request_kind(req) == "math"  # asked at the call start, with the tool known
    req.calls[-1].end = 2.0
    assert request_kind(req) == "qa"
