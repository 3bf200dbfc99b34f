"""Splits without leakage: twins (same prompt length and segment lengths) never straddle
the train / test boundary (issue 28)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from predict_planted import planted_trace

from augserve.predict.evaluate import group_folds, plan_key, split_by_request, twin_ids


def _with_twins(n: int = 60, copies: int = 3) -> list:
    """`n` planted requests, every fifth with `copies - 1` twins (new ids, same plan)."""
    base = planted_trace(n, seed=11)
    twins = [
        replace(tr, request_id=f"{tr.request_id}-twin{k}")
        for tr in base[::5]
        for k in range(1, copies)
    ]
    return base + twins


def test_request_split_leaks_twins_and_group_split_does_not() -> None:
    trace = _with_twins()
    train, test = split_by_request(trace, 0.25, seed=1, by="request")
    assert twin_ids(train, test)  # the old split puts some twins on both sides
    for seed in range(5):
        train, test = split_by_request(trace, 0.25, seed=seed)  # by group: the default
        assert twin_ids(train, test) == set()
        assert len(train) + len(test) == len(trace)
        assert not {t.request_id for t in train} & {t.request_id for t in test}
        assert abs(len(test) - 0.25 * len(trace)) <= 2  # whole groups of at most 3


def test_twin_ids_finds_exactly_the_test_requests_with_a_twin() -> None:
    trace = _with_twins(20, copies=2)
    train = [t for t in trace if not t.request_id.endswith("twin1")]
    test = [t for t in trace if t.request_id.endswith("twin1")] + planted_trace(3, 99, "new")
    assert twin_ids(train, test) == {t.request_id for t in test if "twin" in t.request_id}
    assert plan_key(trace[0]) == plan_key(trace[20])  # r0 and its twin


def test_group_folds_hold_each_request_out_once_with_its_twins() -> None:
    trace = _with_twins()
    folds = group_folds(trace, 4, seed=0)
    held = [t.request_id for _, test in folds for t in test]
    assert sorted(held) == sorted(t.request_id for t in trace)
    sizes = [len(test) for _, test in folds]
    assert max(sizes) - min(sizes) <= 3
    for train, test in folds:
        assert twin_ids(train, test) == set()
        assert len(train) + len(test) == len(trace)
    assert [t.request_id for _, te in folds for t in te] == [
        t.request_id for _, te in group_folds(trace, 4, seed=0) for t in te
    ]
    with pytest.raises(ValueError, match="n_folds"):
        group_folds(trace, 1, seed=0)
    with pytest.raises(ValueError, match="by"):
        split_by_request(trace, 0.2, seed=0, by="kind")
