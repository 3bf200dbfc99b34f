"""Precomputed predictions equal the live ones the scheduler would have asked for."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from augserve.core.config import scheduler_config_for
from augserve.core.prediction import Prediction, Predictor
from augserve.core.request import Request, Segment
from augserve.predict.base import make_predictor
from augserve.predict.features import meta_features
from augserve.predict.learned import LearnedConfig, LearnedPredictor
from augserve.predict.train import train_learned_predictor
from augserve.profiles import load_profile
from augserve.sim.precompute import (
    PrecomputedPredictor,
    planned_state,
    prediction_points,
    should_precompute,
)
from augserve.sim.simulator import simulate
from augserve.workload import ArrivalConfig, arrival_times_until, resample
from augserve.workload.generators import infercept_like

WINDOW = 20.0
PROFILE = load_profile("opt-13b-h800")


class Spy:
    """Passes calls to `inner`, recording each live state it was asked about."""

    def __init__(self, inner: Predictor) -> None:
        self.inner = inner
        self.name = "spy"  # not "learned...": the simulator does not precompute it
        self.seen: list[tuple[str, int, list[float], Prediction]] = []

    def predict(self, requests: Sequence[Request]) -> list[Prediction]:
        out = self.inner.predict(requests)
        for r, p in zip(requests, out, strict=True):
            self.seen.append((r.request_id, r.segment_index, meta_features(r), p))
        return out


@pytest.fixture(scope="module")
def learned() -> LearnedPredictor:
    cfg = LearnedConfig(embed=False, max_iter=15, learning_rate=0.3)
    return train_learned_predictor(list(infercept_like(120, seed=1)), cfg)


def _requests(seed: int = 0) -> list[Request]:
    """A resampled stream (repeated plans under distinct ids), as the bench runner builds."""
    times = arrival_times_until(ArrivalConfig(4.0, 1.0), WINDOW, seed=seed)
    return resample(infercept_like(30, seed=2), len(times), seed=seed).to_requests(times)


def _run(predictor: Predictor) -> list[Request]:
    reqs = _requests()
    cfg = scheduler_config_for(PROFILE, "augserve")
    simulate(reqs, PROFILE, cfg, WINDOW, drain=30.0, predictor=predictor)
    return reqs


def _same(a: Prediction, b: Prediction) -> bool:
    if (a.call_time is None) != (b.call_time is None):
        return False
    return (
        a.output_len == pytest.approx(b.output_len, rel=1e-9)
        and (a.call_time is None or a.call_time == pytest.approx(b.call_time, rel=1e-9))
        and a.return_len == pytest.approx(b.return_len, rel=1e-9)
    )


def test_precomputed_equals_live_predictions(learned: LearnedPredictor) -> None:
    spy = Spy(learned)
    _run(spy)
    assert len(spy.seen) > 50 and any(k > 0 for _, k, _, _ in spy.seen)
    table = PrecomputedPredictor(learned, _requests())
    assert table.num_states < len(table)  # resampled plans share their states
    by_id = {r.request_id: r for r in _requests()}
    for rid, k, live_features, live_pred in spy.seen:
        state = planned_state(by_id[rid], k)
        assert meta_features(state) == pytest.approx(live_features, rel=1e-12), (rid, k)
        got = table.predict([state])[0]
        assert _same(got, live_pred), (rid, k, got, live_pred)
    assert table.misses == 0


def test_simulation_with_precompute_is_unchanged(learned: LearnedPredictor) -> None:
    live = _run(Spy(learned))
    reqs = _requests()
    cfg = scheduler_config_for(PROFILE, "augserve")
    from augserve.sim.simulator import Simulator

    sim = Simulator(PROFILE, cfg, learned)
    sim.run(reqs, WINDOW, drain=30.0)
    pre = sim.sched.predictor
    assert isinstance(pre, PrecomputedPredictor)
    assert pre.hits > 50 and pre.misses == 0
    assert [(r.finish_time, r.first_token_time, r.num_generated_tokens) for r in reqs] == [
        (r.finish_time, r.first_token_time, r.num_generated_tokens) for r in live
    ]


def test_mismatched_state_falls_back_to_inner(learned: LearnedPredictor) -> None:
    req = Request("x", 0.0, 30, [Segment(5, 1.0, 7), Segment(3)])
    table = PrecomputedPredictor(learned, [req])
    assert prediction_points(req) == [0, 1]
    live = planned_state(req, 1)
    live.num_tokens += 2  # e.g. a generation cap changed the counts
    assert table.predict([live]) == learned.predict([live])
    assert table.misses == 1 and table.hits == 0
    assert table.predict([planned_state(req, 0)]) == learned.predict([planned_state(req, 0)])
    assert table.hits == 1


def test_only_learned_predictors_are_precomputed(learned: LearnedPredictor) -> None:
    assert should_precompute(learned)
    assert not should_precompute(make_predictor("oracle"))
    assert not should_precompute(make_predictor("noisy:0.2"))  # draws in call order
    assert not should_precompute(None)
    assert not should_precompute(PrecomputedPredictor(learned, []))
