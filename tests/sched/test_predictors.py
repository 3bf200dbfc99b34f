"""Oracle and noisy-oracle predictors (docs/paper.md section 5, paper section 6.3)."""

import pytest

from augserve.core.request import Request, Segment
from augserve.predict.base import NoisyOraclePredictor, OraclePredictor, make_predictor


def _req() -> Request:
    return Request("r", 0.0, 10, [Segment(100, 4.0, 7), Segment(20)])


def test_oracle_reads_the_current_segment_and_what_is_left_of_it():
    req = _req()
    p = OraclePredictor().predict([req])[0]
    assert (p.output_len, p.call_time, p.return_len) == (100.0, 4.0, 7.0)
    req.segment_generated = 30
    assert OraclePredictor().predict([req])[0].output_len == 70.0
    req.segment_index, req.segment_generated = 1, 0
    p = OraclePredictor().predict([req])[0]
    assert (p.output_len, p.call_time) == (20.0, None)


def test_noisy_oracle_is_true_value_times_one_plus_minus_p_and_seeded():
    preds = NoisyOraclePredictor(0.3, seed=5).predict([_req() for _ in range(400)])
    outs = {round(p.output_len, 6) for p in preds}
    calls = {round(p.call_time, 6) for p in preds if p.call_time is not None}
    assert outs == {70.0, 130.0} and calls == {2.8, 5.2}
    share_up = sum(p.output_len > 100 for p in preds) / len(preds)
    assert 0.4 < share_up < 0.6
    again = NoisyOraclePredictor(0.3, seed=5).predict([_req() for _ in range(400)])
    assert [p.output_len for p in again] == [p.output_len for p in preds]


def test_make_predictor_specs():
    assert make_predictor("oracle").name == "oracle"
    assert make_predictor("noisy:0.2").name == "noisy:0.2"
    for bad in ["", "noisy:x", "noisy:1.5", "magic"]:
        with pytest.raises(ValueError):
            make_predictor(bad)
