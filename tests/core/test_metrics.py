"""Metrics against hand-computed examples."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from augserve.bench.report import read_json_rows, write_csv, write_json
from augserve.core.metrics import (
    SLOConfig,
    compute_metrics,
    max_rate_at_attainment,
    percentile,
    request_metrics,
)
from augserve.core.request import CallRecord, Request, RequestStatus, Segment

SLO = SLOConfig(norm_latency_slo=0.5, ttft_slo=1.0)


def _req(
    rid: str,
    arrival: float,
    segments: list[Segment],
    *,
    status: RequestStatus,
    sched: float | None = None,
    first: float | None = None,
    finish: float | None = None,
    generated: int = 0,
    exec_time: float = 0.0,
    calls: list[CallRecord] | None = None,
) -> Request:
    r = Request(rid, arrival, prompt_len=8, segments=segments)
    r.status, r.first_scheduled_time, r.first_token_time = status, sched, first
    r.finish_time, r.num_generated_tokens, r.exec_time = finish, generated, exec_time
    r.calls = calls or []
    return r


def _workload() -> list[Request]:
    done = RequestStatus.FINISHED_STOPPED
    return [
        # A: one 4 s call; norm = (10 - 0 - 4) / 20 = 0.3 -> meets the SLO
        _req(
            "A",
            0.0,
            [Segment(10, 4.0, 3), Segment(10)],
            status=done,
            sched=0.2,
            first=0.5,
            finish=10.0,
            generated=20,
            exec_time=5.0,
            calls=[CallRecord(start=2.0, end=6.0, returned_tokens=3)],
        ),
        # B: TTFT 2 s and norm (11 - 1) / 10 = 1.0 -> misses
        _req(
            "B",
            1.0,
            [Segment(10)],
            status=RequestStatus.FINISHED_LENGTH,
            sched=2.5,
            first=3.0,
            finish=11.0,
            generated=10,
            exec_time=4.0,
        ),
        # C: still running at the end of the window
        _req(
            "C",
            2.0,
            [Segment(100)],
            status=RequestStatus.RUNNING,
            sched=2.1,
            first=2.5,
            generated=40,
        ),
        # D: finishes after the window ends -> unfinished
        _req("D", 3.0, [Segment(5)], status=done, sched=3.0, first=3.1, finish=120.0, generated=5),
        # F: aborted -> unfinished
        _req("F", 4.0, [Segment(7)], status=RequestStatus.FINISHED_ABORTED, finish=5.0),
        # E: arrives after the window -> ignored
        _req(
            "E", 150.0, [Segment(3)], status=done, sched=150, first=150.1, finish=151, generated=3
        ),
    ]


def test_hand_computed_summary() -> None:
    m = compute_metrics(_workload(), SLO, start=0.0, end=100.0)
    assert (m.num_requests, m.num_finished, m.num_unfinished, m.num_met_slo) == (5, 2, 3, 1)
    assert m.finished_share == pytest.approx(0.4)
    assert m.slo_attainment == pytest.approx(0.2)
    assert m.goodput == pytest.approx(0.01)
    assert m.throughput_rps == pytest.approx(0.02)
    assert m.throughput_tps == pytest.approx(0.3)
    assert (m.ttft_mean, m.ttft_p50) == pytest.approx((1.25, 1.25))
    assert m.ttft_p99 == pytest.approx(0.5 + 1.5 * 0.99)
    assert m.norm_latency_mean == pytest.approx(0.65)
    assert m.norm_latency_p95 == pytest.approx(0.3 + 0.7 * 0.95)
    assert (m.latency_mean, m.latency_p99) == pytest.approx((10.0, 10.0))
    assert m.queueing_mean == pytest.approx(0.85)
    assert m.execution_mean == pytest.approx(4.5)
    assert m.call_time_mean == pytest.approx(2.0)
    assert m.other_mean == pytest.approx((0.8 + 4.5) / 2)
    # longest quartile by planned tokens: ceil(5 / 4) = 2 -> C (100) and A (20)
    assert m.long_quartile_requests == 2
    assert m.long_quartile_finished_share == pytest.approx(0.5)
    assert m.long_quartile_latency_p99 == pytest.approx(10.0)
    d = m.to_dict()
    assert d["goodput"] == m.goodput and len(d) == len(m.__dataclass_fields__)


def test_call_time_excluded_from_normalized_latency() -> None:
    a = _workload()[0]
    row = request_metrics(a, SLO)
    assert row.norm_latency == pytest.approx(0.3)  # (10 - 4) / 20, not 10 / 20
    assert row.met_slo and row.ttft == pytest.approx(0.5)
    a.calls.append(CallRecord(start=7.0, end=9.0))
    assert request_metrics(a, SLO).norm_latency == pytest.approx((10 - 6) / 20)


def test_unfinished_have_no_latency_and_fail_slo() -> None:
    rows = [request_metrics(r, SLO, end=100.0) for r in _workload()]
    by_id = {r.request_id: r for r in rows}
    for rid in ("C", "D", "F"):
        assert not by_id[rid].finished and not by_id[rid].met_slo
        assert by_id[rid].norm_latency is None and by_id[rid].latency is None


def test_default_window_and_empty() -> None:
    m = compute_metrics(_workload(), SLO)
    assert (m.window_start, m.window_end) == (0.0, 151.0)
    assert m.num_requests == 6 and m.num_finished == 4  # D now inside, E counted
    empty = compute_metrics([], SLO)
    assert empty.num_requests == 0 and empty.ttft_p99 is None and empty.goodput == 0.0
    with pytest.raises(ValueError, match="window end"):
        compute_metrics(_workload(), SLO, start=10.0, end=5.0)


def test_slo_config() -> None:
    assert SLOConfig.from_iteration_time(0.02).norm_latency_slo == pytest.approx(0.2)
    with pytest.raises(ValueError, match="norm_latency_slo"):
        SLOConfig(0.0)
    with pytest.raises(ValueError, match="ttft_slo"):
        SLOConfig(1.0, ttft_slo=-1.0)


def test_percentile_and_max_rate() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 99) == pytest.approx(1.99)
    sweep = [
        {"rate": 1.0, "slo_attainment": 0.99},
        {"rate": 2.0, "slo_attainment": 0.92},
        {"rate": 3.0, "slo_attainment": 0.5},
    ]
    assert max_rate_at_attainment(sweep, 0.9) == 2.0
    assert max_rate_at_attainment(sweep, 0.995) is None


def test_report_json_csv(tmp_path: Path) -> None:
    rows = [
        compute_metrics(_workload(), SLO, 0.0, 100.0).to_dict() | {"policy": "x"},
        {"policy": "y", "goodput": math.nan},
    ]
    write_json(tmp_path / "r.json", rows, seed=1)
    assert json.loads((tmp_path / "r.json").read_text())["meta"] == {"seed": 1}
    back = read_json_rows(tmp_path / "r.json")
    assert back[0]["goodput"] == pytest.approx(0.01) and back[1]["goodput"] is None
    write_csv(tmp_path / "r.csv", rows)
    with (tmp_path / "r.csv").open() as fh:
        got = list(csv.DictReader(fh))
    assert got[0]["policy"] == "x" and got[1]["ttft_p99"] == ""
    (tmp_path / "plain.json").write_text(json.dumps(rows[:1]))  # a bare list of rows
    assert read_json_rows(tmp_path / "plain.json")[0]["policy"] == "x"
