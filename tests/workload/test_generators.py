"""Generated traces reproduce their targets (tolerances stated per assertion)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from augserve.workload.generators import infercept_like, mix_no_call, resample, toolbench_like
from augserve.workload.infercept_fit import INFERCEPT_PROFILES
from augserve.workload.profiles import fit_profiles
from augserve.workload.registry import make_workload
from augserve.workload.stats import trace_stats
from augserve.workload.trace import Trace

N = 3000


def test_reproducible_and_seed_dependent() -> None:
    assert list(infercept_like(50, seed=3)) == list(infercept_like(50, seed=3))
    assert list(infercept_like(50, seed=3)) != list(infercept_like(50, seed=4))
    assert list(toolbench_like(20, seed=1)) == list(toolbench_like(20, seed=1))


def test_fitted_constants_match_a_fresh_fit(merged: Trace) -> None:
    fresh = fit_profiles(merged)
    assert set(fresh) == set(INFERCEPT_PROFILES)
    for kind, prof in INFERCEPT_PROFILES.items():
        got = fresh[kind]
        assert prof.weight == pytest.approx(got.weight, rel=1e-4)
        assert prof.mean_calls == pytest.approx(got.mean_calls, rel=1e-4)
        for field in ("prompt_len", "output_len", "call_time", "return_len"):
            a, b = getattr(prof, field), getattr(got, field)
            assert a.mu == pytest.approx(b.mu, rel=1e-4, abs=1e-6), (kind, field)
            assert a.sigma == pytest.approx(b.sigma, rel=1e-4, abs=1e-6), (kind, field)


def test_infercept_like_matches_real_trace_stats() -> None:
    s = trace_stats(infercept_like(N, seed=0))
    assert s["calls_per_request_mean"] == pytest.approx(4.6, rel=0.05)
    assert s["calls_per_request_max"] == 16
    assert s["call_time_median"] == pytest.approx(7.4, rel=0.15)
    assert s["call_time_mean"] == pytest.approx(12.6, rel=0.15)
    assert s["call_share_under_1ms"] == pytest.approx(0.15, abs=0.03)
    assert s["call_share_over_20s"] == pytest.approx(0.19, abs=0.04)
    for kind, prof in INFERCEPT_PROFILES.items():
        row = s["by_kind"][kind]
        assert row["requests"] / N == pytest.approx(prof.weight, abs=0.03)
        assert row["calls_per_request_mean"] == pytest.approx(prof.mean_calls, rel=0.1)
        # medians within 4 standard errors of a log-normal median (+2% rounding)
        for key, dist, count in (
            ("call_time_median", prof.call_time, row["calls"]),
            ("prompt_len_median", prof.prompt_len, row["requests"]),
        ):
            tol = 4 * 1.2533 * dist.sigma / np.sqrt(count) + 0.02
            assert abs(np.log(row[key] / dist.median)) < tol, (kind, key)


def test_alfworld_calls_share_one_duration() -> None:
    trace = infercept_like(100, seed=0, kinds=("alfworld",))
    for r in trace:
        assert len({s.call_time for s in r.segments if s.has_call}) == 1
    with pytest.raises(ValueError, match="kinds"):
        infercept_like(5, kinds=("nope",))


def test_toolbench_like_targets() -> None:
    s = trace_stats(toolbench_like(N, seed=0))
    assert s["calls_per_request_mean"] == pytest.approx(3.7, rel=0.05)
    assert s["call_time_median"] == pytest.approx(1.5, rel=0.1)
    assert s["returned_len_median"] == pytest.approx(200, rel=0.1)
    assert s["prompt_len_median"] == pytest.approx(1200, rel=0.1)


def test_resample_uniform_with_replacement(merged: Trace) -> None:
    out = resample(merged, 4000, seed=2)
    assert len(out) == 4000 and len({r.request_id for r in out}) == 4000
    assert resample(merged, 10, 5).requests == resample(merged, 10, 5).requests
    s = trace_stats(out)
    assert s["calls_per_request_mean"] == pytest.approx(4.64, rel=0.05)
    counts = np.bincount([hash(r.request_id.rsplit("-", 1)[0]) % 7 for r in out], minlength=7)
    assert counts.min() > 0


def test_mixed_disables_fraction_keeping_output() -> None:
    base = infercept_like(400, seed=1)
    mixed = mix_no_call(base, 0.5, seed=1)
    no_call = [m for b, m in zip(base, mixed, strict=True) if b.num_calls and not m.num_calls]
    assert len(no_call) == pytest.approx(200, abs=5)
    for b, m in zip(base, mixed, strict=True):
        assert (b.prompt_len, b.output_len) == (m.prompt_len, m.output_len)
    with pytest.raises(ValueError, match="fraction"):
        mix_no_call(base, 1.5)


def test_registry(merged_path: Path, tmp_path: Path) -> None:
    assert len(make_workload("infercept", 30, 0)) == 30
    assert len(make_workload("infercept-like", 30, 0)) == 30
    assert len(make_workload(f"resample:{merged_path}", 12, 0)) == 12
    assert len(make_workload(f"file:{merged_path}", 0)) == 397
    mixed = make_workload("mixed:1.0:toolbench-like", 20, 0)
    assert all(r.num_calls == 0 for r in mixed)
    with pytest.raises(ValueError, match="unknown name"):
        make_workload("bogus", 3)
    with pytest.raises(ValueError, match="FRACTION"):
        make_workload("mixed:x", 3)
