"""The vs-vLLM tool benchmark's target check, on hand-made rows (no server)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("httpx")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "vs_vllm"))

import bench_tools_report as rep  # noqa: E402


def _row(rate: float, engine: str, met: int, n: int, window: float = 30.0) -> dict[str, Any]:
    m = {
        "num_requests": n,
        "num_met_slo": met,
        "slo_attainment": met / n,
        "goodput_per_arrival_s": met / window,
        "arrival_window_s": window,
    }
    return {"rate": rate, "engine": engine, "metrics": m}


def test_target_is_judged_at_the_first_rate_below_half_and_names_the_ceiling() -> None:
    rows = [
        _row(4, "vllm", 90, 120),  # 75%: not the rate the target is judged at
        _row(4, "augserve:augserve", 120, 120),
        _row(5, "vllm", 70, 150),  # 47%: the first rate below 50%
        _row(5, "augserve:augserve", 120, 150),
    ]
    text = rep.target(rows)
    assert "at 5 req/s" in text and "MISSED" in text
    assert "1.71x" in text  # 120 / 70
    # every one of the 150 requests meeting the SLO: 5 req/s against vLLM's 70/30
    assert "2.14x (5.000 req/s)" in text


def test_target_met_and_the_old_results_without_the_window_field() -> None:
    rows = [_row(6, "vllm", 40, 180), _row(6, "augserve:augserve", 125, 180)]  # 3.125x
    for r in rows:
        del r["metrics"]["arrival_window_s"]  # derived from goodput and met count
    text = rep.target(rows)
    assert "3.13x, MET" in text and "4.50x (6.000 req/s)" in text


def test_target_reads_the_paper_policy_with_a_predictor_suffix() -> None:
    rows = [_row(0.5, "vllm", 10, 34), _row(0.5, "augserve:augserve+online", 19, 34)]
    text = rep.target(rows)
    assert "augserve:augserve+online 0.633 req/s" in text and "1.90x, MISSED" in text  # target 3x
    rows.append(_row(0.5, "augserve:augserve-slo+online", 30, 34))  # not the paper policy
    assert "1.90x" in rep.target(rows)


def test_target_not_testable_when_vllm_keeps_half() -> None:
    rows = [_row(2, "vllm", 55, 60), _row(2, "augserve:augserve", 60, 60)]
    assert rep.target(rows).startswith("target not testable")


def test_capacity_is_the_highest_rate_meeting_90_percent_and_says_where_it_first_broke() -> None:
    rows = [
        _row(2, "vllm", 95, 100),
        _row(3, "vllm", 85, 100),  # vLLM's capacity: 2
        _row(2, "augserve:a", 100, 100),
        _row(3, "augserve:a", 95, 100),
        _row(4, "augserve:a", 89, 100),  # noisy: below the floor at 4, above it at 6
        _row(6, "augserve:a", 95, 100),
        _row(2, "augserve:b", 50, 100),
        _row(3, "augserve:b", 10, 100),
    ]
    text = rep.capacities(rows)
    assert "vllm 2 req/s;" in text
    assert "augserve:a 6 req/s (3.00x vLLM; every rate up to 3)" in text
    assert "augserve:b below every rate" in text


def test_turn_metrics_split_first_turns_and_count_the_reuse_the_server_reported() -> None:
    from session_loop import TurnLog

    log = TurnLog(
        ttfts=[0.5, 0.1, 0.2, 0.4, 0.3],
        prompt_tokens=[100, 150, 200, 100, 120],
        cached_tokens=[0, 96, 192, 64, None],  # the last server said nothing
        first_turn=[True, False, False, True, False],
    )
    m = rep.turn_metrics(log)
    assert m["turns"] == 5
    assert m["prefix_reuse"] == pytest.approx((0 + 96 + 192 + 64) / (100 + 150 + 200 + 100))
    assert m["first_turn_prefix_reuse"] == pytest.approx(64 / 200)
    assert m["first_turn_ttft_p50"] == 0.5 and m["later_turn_ttft_p50"] == 0.2
    assert rep.turn_metrics(TurnLog())["prefix_reuse"] is None
