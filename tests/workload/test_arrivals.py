from __future__ import annotations

import numpy as np
import pytest

from augserve.workload.arrivals import ArrivalConfig, gamma_arrivals, poisson_arrivals


@pytest.mark.parametrize(("rate", "cv"), [(2.0, 1.0), (3.0, 1.5), (0.5, 2.0), (4.0, 0.5)])
def test_rate_and_cv(rate: float, cv: float) -> None:
    times = np.asarray(gamma_arrivals(rate, cv, n=40_000, seed=7))
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert 1.0 / gaps.mean() == pytest.approx(rate, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)
    assert np.all(np.diff(times) >= 0)


def test_window_and_reproducible() -> None:
    times = poisson_arrivals(5.0, duration=2000.0, seed=1, start=10.0)
    assert all(10.0 < t < 2010.0 for t in times)
    assert len(times) / 2000.0 == pytest.approx(5.0, rel=0.05)
    assert times == poisson_arrivals(5.0, duration=2000.0, seed=1, start=10.0)
    assert times != poisson_arrivals(5.0, duration=2000.0, seed=2, start=10.0)
    assert poisson_arrivals(1.0, n=5, seed=0) == poisson_arrivals(1.0, n=5, seed=0)


def test_bad_config() -> None:
    with pytest.raises(ValueError, match="rate"):
        ArrivalConfig(0.0)
    with pytest.raises(ValueError, match="cv"):
        ArrivalConfig(1.0, cv=-1)
    with pytest.raises(ValueError, match="exactly one"):
        poisson_arrivals(1.0)
