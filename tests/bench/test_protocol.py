"""The comparison protocol's statistics and schema, on hand-computed numbers."""

from __future__ import annotations

import math
from typing import Any

import pytest

from augserve.bench import capacity as stats
from augserve.bench import protocol as p


def test_mean_interval_is_the_t_interval() -> None:
    iv = stats.mean_interval([0.8, 0.9, 1.0])  # s = 0.1, t_{0.975,2} = 4.303
    assert iv.mean == pytest.approx(0.9)
    half = 4.303 * 0.1 / math.sqrt(3)  # 0.24843
    assert (iv.low, iv.high) == pytest.approx((0.9 - half, 0.9 + half))
    assert iv.n == 3
    one = stats.mean_interval([0.5])
    assert one.mean == 0.5 and math.isnan(one.low) and one.to_dict()["low"] is None
    assert stats.t95(4) == 2.776 and stats.t95(100) == 1.96


def test_crossing_interpolates_the_first_fall_through_the_floor() -> None:
    assert stats.crossing([1, 2, 3], [1.0, 0.95, 0.75]).rate == pytest.approx(2.25)
    # back above 90% at 3 does not count: the load is held from the lowest rate on
    c = stats.crossing([1, 2, 3, 4], [0.95, 0.85, 0.95, 0.5])
    assert c.rate == pytest.approx(1.5) and c.censored == ""
    assert stats.crossing([1, 2], [0.8, 0.5]) == stats.Crossing(1, "below")
    assert stats.crossing([1, 2], [1.0, 0.95]) == stats.Crossing(2, "above")
    with pytest.raises(ValueError, match="ascending"):
        stats.crossing([2, 1], [1.0, 0.5])


def test_capacity_from_the_mean_curve_with_the_per_repeat_interval() -> None:
    per_repeat = [[1.0, 1.0, 1.0], [0.95, 0.9, 1.0], [0.7, 0.8, 0.6]]
    cap = stats.capacity([1, 2, 3], per_repeat)
    assert cap.rate == pytest.approx(2.2)  # mean curve 1, 0.95, 0.7: 2 + 0.05 / 0.25
    assert cap.per_repeat == pytest.approx((2.2, 2.0, 2.25))  # 0.9 is not below 90%
    half = 4.303 * math.sqrt(0.035 / 2) / math.sqrt(3)  # 0.32865
    assert cap.interval.mean == pytest.approx(2.15)
    assert (cap.interval.low, cap.interval.high) == pytest.approx((2.15 - half, 2.15 + half))
    assert cap.censored == ""


def test_a_censored_repeat_has_no_interval() -> None:
    cap = stats.capacity([1, 2], [[1.0, 1.0, 1.0], [0.5, 0.95, 0.5]])
    assert cap.censored == "repeat" and math.isnan(cap.interval.low)
    assert cap.per_repeat == pytest.approx((1.2, 2.0, 1.2))


def test_capacity_ratio_pairs_the_repeats() -> None:
    ours = stats.Capacity(4.2, stats.mean_interval([4.0, 4.4, 4.2]), (4.0, 4.4, 4.2))
    base = stats.Capacity(2.0, stats.mean_interval([2.0, 2.0, 2.0]), (2.0, 2.0, 2.0))
    r = stats.capacity_ratio(ours, base)
    assert r["ratio"] == pytest.approx(2.1) and r["per_repeat"] == pytest.approx([2.0, 2.2, 2.1])
    half = 4.303 * 0.1 / math.sqrt(3)
    assert r["interval"]["low"] == pytest.approx(2.1 - half)
    assert r["interval"]["high"] == pytest.approx(2.1 + half)


def test_a_censored_ratio_keeps_a_conservative_lower_end() -> None:
    # ours never falls under 90% inside the grid (censored above in every repeat);
    # the baseline crosses inside it: each per-repeat ratio only understates the truth
    ours = stats.capacity([1.5, 4.0, 6.5], [[1.0] * 3, [0.99, 0.98, 0.99], [0.96, 0.98, 0.95]])
    base = stats.capacity([1.5, 4.0, 6.5], [[1.0] * 3, [0.72, 0.55, 0.8], [0.8, 0.6, 0.7]])
    assert ours.per_repeat_censored == ("above",) * 3 and base.per_repeat_censored == ("",) * 3
    r = stats.capacity_ratio(ours, base)
    assert r["censored"] and r["interval"]["low"] is None  # no two-sided interval
    lb = stats.mean_interval(r["per_repeat"])
    assert r["lower_bound"] == {"mean": pytest.approx(lb.mean), "low": pytest.approx(lb.low),
                                "n": 3}  # fmt: skip
    assert 1.0 < r["lower_bound"]["low"] < r["lower_bound"]["mean"]


def test_no_lower_end_where_the_censoring_points_the_wrong_way() -> None:
    rates = [1.0, 2.0]
    above = stats.capacity(rates, [[1.0] * 3, [1.0] * 3])  # capacity >= 2: a lower bound
    below = stats.capacity(rates, [[0.5] * 3, [0.5] * 3])  # capacity < 1: an upper bound
    inside = stats.capacity(rates, [[1.0] * 3, [0.8] * 3])
    assert stats.capacity_ratio(inside, inside)["lower_bound"] is None  # nothing censored
    assert stats.capacity_ratio(below, inside)["lower_bound"] is None  # ours overstated
    assert stats.capacity_ratio(inside, above)["lower_bound"] is None  # baseline understated
    assert stats.capacity_ratio(inside, below)["lower_bound"] is not None
    assert stats.capacity_ratio(above, inside)["lower_bound"] is not None


def test_memory_must_be_equal_and_names_the_field() -> None:
    p.Memory(2048, 2048, 4096)
    with pytest.raises(ValueError, match="memory.baseline_tokens"):
        p.Memory(4096, 4096, 4096)  # the old bench_tools.py: host pool for augserve only
    with pytest.raises(ValueError, match="memory.augserve_host_tokens"):
        p.Memory(4096, -1, 4095)
    with pytest.raises(ValueError, match="slo.source"):
        p.SLO(1.0, 0.1, "")
    with pytest.raises(ValueError, match="slo.ttft_s"):
        p.SLO(0.0, 0.1, "x")


def _config(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": "t", "workload": "infercept", "time_scale": 1.0, "length_scale": 0.25,
        "rates": [1, 2], "duration_s": 60, "drain_s": 30, "seeds": [0, 1, 2],
        "memory": {"augserve_device_tokens": 4096, "augserve_host_tokens": 0,
                   "baseline_tokens": 4096},
        "slo": {"ttft_s": 0.4, "norm_latency_s": 0.1, "source": "benchmarks/configs/t.json"},
    }  # fmt: skip
    d.update(over)
    return d


def test_config_fields_are_checked() -> None:
    cfg = p.ComparisonConfig.from_dict(_config())
    assert cfg.workload_seed(2, 1) == 2001 and cfg.rates == (1.0, 2.0)
    with pytest.raises(ValueError, match="seeds"):
        p.ComparisonConfig.from_dict(_config(seeds=[0, 1]))
    with pytest.raises(ValueError, match="time_scale"):
        p.ComparisonConfig.from_dict(_config(time_scale=0))
    with pytest.raises(ValueError, match="missing field.*slo"):
        p.ComparisonConfig.from_dict({k: v for k, v in _config().items() if k != "slo"})
    with pytest.raises(ValueError, match="unknown field.*rate_list"):
        p.ComparisonConfig.from_dict(_config(rate_list=[1]))


def _cell(rate: float, att: list[float]) -> dict[str, Any]:
    return {"rate": rate, "engine": "vllm", "seeds": [0, 1, 2], "attainment": att,
            "goodput": [a * rate for a in att], "load": [3.0, 3.1, 3.2]}  # fmt: skip


def test_result_file_schema() -> None:
    cfg = p.ComparisonConfig.from_dict(_config())
    payload = p.result_file(
        command="x", commit="abc", date="2026-12-02", load=[1.0, 1.0, 1.0], memory=cfg.memory,
        slo=cfg.slo, repeats=3, time_scale=1.0, cells=[_cell(1, [1.0, 0.9, 0.8])],
    )  # fmt: skip
    cell = payload["cells"][0]
    assert cell["attainment_interval"]["mean"] == pytest.approx(0.9)
    assert cell["goodput_interval"]["n"] == 3
    assert payload["memory"]["baseline_tokens"] == 4096
    bad = dict(payload, cells=[_cell(1, [1.0, 0.9])])
    with pytest.raises(ValueError, match=r"cells\[0\].attainment has 2 values"):
        p.check_result(bad)
    with pytest.raises(ValueError, match="missing field 'memory'"):
        p.check_result({k: v for k, v in payload.items() if k != "memory"})
    cap = stats.engine_capacity([_cell(2, [0.8, 0.8, 0.8]), _cell(1, [1.0, 1.0, 1.0])], "vllm")
    assert cap.rate == pytest.approx(1.5)
