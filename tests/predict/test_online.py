"""The online predictor (`predict/online.py`): priors, convergence, elapsed-time evidence."""

import math
import random

import pytest

from augserve.core.config import SchedulerConfig
from augserve.core.request import CallRecord, Request, Segment
from augserve.predict.base import make_predictor
from augserve.predict.lognormal import LogStats, residual_mean
from augserve.predict.online import CallTimeModel, OnlineConfig, OnlinePredictor
from augserve.sched.scheduler import Scheduler


def test_residual_mean_matches_sampling_and_grows_past_the_median():
    mu, sigma = math.log(1.5), 0.5
    rng = random.Random(0)
    xs = [math.exp(rng.gauss(mu, sigma)) for _ in range(200_000)]
    for e in (0.0, 1.0, 3.0):
        tail = [x - e for x in xs if x > e]
        assert residual_mean(mu, sigma, e) == pytest.approx(sum(tail) / len(tail), rel=0.03)
    left = [residual_mean(mu, sigma, e) for e in (2.0, 5.0, 20.0, 1e3)]
    assert left == sorted(left) and left[-1] > 10  # far in the tail: stable and still growing


def test_call_time_starts_at_the_prior_and_converges():
    calls = CallTimeModel(OnlineConfig(call_prior=0.2))
    calls.set_prior("search", 4.0)
    assert calls.predict("search") == pytest.approx(4.0)
    assert calls.predict("other") == pytest.approx(0.2)  # the global prior
    for _ in range(4):
        calls.observe("search", 10, 1.5)
    assert 0.75 < calls.predict("search") < 3.0  # within 2x after a few calls
    for _ in range(30):
        calls.observe("search", 10, 1.5)
    assert calls.predict("search") == pytest.approx(1.5, rel=0.1)
    est = calls.tools()["search"]
    assert est.count == 34 and est.mean_abs_error > 0


def test_argument_size_separates_calls_of_one_tool():
    calls = CallTimeModel(OnlineConfig())
    for _ in range(10):
        calls.observe("fetch", 5, 0.1)
        calls.observe("fetch", 5000, 3.0)
    assert calls.predict("fetch", 5) < 0.3 and calls.predict("fetch", 4000) > 1.5


def test_a_call_past_its_prediction_is_expected_to_run_on():
    pred = OnlinePredictor()
    for _ in range(10):
        pred.calls.observe("t", 0, 1.0)
    req = Request("r", 0.0, 10)
    req.calls.append(CallRecord(start=0.0, tool="t"))
    early, late, later = (pred.expected_call_time(req, t) for t in (0.0, 3.0, 10.0))
    assert early == pytest.approx(pred.calls.predict("t"))
    assert 3.0 < late < later and later > 10.0


def test_learns_from_the_scheduler_without_reading_plans():
    """Driven by the scheduler, it learns call times and segment lengths of a kind."""
    from driver import Driver, easy_profile  # tests/sched

    pred = make_predictor("online")
    assert isinstance(pred, OnlinePredictor)
    sched = Scheduler(
        SchedulerConfig(policy="augserve", num_device_blocks=256), easy_profile(), pred
    )
    d = Driver(sched)
    for i in range(20):
        r = Request(f"r{i}", 0.0, 20, [Segment(8, 0.5, 4), Segment(3)], kind="math")
        d.add(r)
    d.run_until_idle()
    fresh = Request("new", 0.0, 20, [Segment(1000, 99.0, 1)], kind="math")
    p = pred.predict([fresh])[0]
    assert p.call_time is not None and p.call_time == pytest.approx(0.5, rel=0.3)
    assert p.output_len == pytest.approx(8, rel=0.3)  # not the plan's 1000
    assert p.return_len == pytest.approx(4, rel=0.3)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="decay"):
        OnlineConfig(decay=0)
    with pytest.raises(ValueError, match="prior mean"):
        LogStats.with_prior(0.0, 1.0)
