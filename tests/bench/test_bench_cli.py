"""`augserve bench` end to end on a tiny window; runner pieces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from augserve.bench import runner
from augserve.bench.aggregate import aggregate
from augserve.bench.pool import run_points
from augserve.bench.runner import (
    WALL_TIME_COLUMNS,
    BenchPoint,
    arrival_cv,
    expand_points,
    get_backend,
    register_backend,
    run_sim_point,
)
from augserve.cli import main
from augserve.cli.bench import format_table


def test_bench_cli_writes_json_csv_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b"
    rc = main(
        [
            "bench",
            "--workload",
            "infercept-like",
            "--policies",
            "vllm,augserve",
            "--rates",
            "2,4",
            "--window",
            "10",
            "--drain",
            "5",
            "--seeds",
            "2",
            "--workers",
            "1",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    payload = json.loads((out / "results.json").read_text())
    rows = payload["rows"]
    assert len(rows) == 4 and {r["policy"] for r in rows} == {"vllm", "augserve"}
    for r in rows:
        for key in (
            "policy",
            "rate",
            "goodput",
            "slo_attainment",
            "ttft_mean",
            "ttft_p99",
            "norm_latency_mean",
        ):
            assert key in r
        assert r["num_seeds"] == 2
    assert len(json.loads((out / "points.json").read_text())["rows"]) == 8
    assert (out / "results.csv").read_text().startswith("policy,")
    assert (out / "bench.png").read_bytes()[:4] == b"\x89PNG"
    text = capsys.readouterr().out
    assert "goodput" in text and "plot:" in text and "augserve" in text


def test_bench_cli_gamma_and_parallel_workers(tmp_path: Path) -> None:
    rc = main(
        [
            "bench",
            "--workload",
            "infercept-like",
            "--policies",
            "infercept,ssjf",
            "--rates",
            "3",
            "--arrival",
            "gamma:2",
            "--window",
            "8",
            "--workers",
            "2",
            "--no-progress",
            "--predictor",
            "noisy:0.2",
            "--beta",
            "1e-4",
            "--max-batch-tokens",
            "512",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [r["policy"] for r in rows] == ["infercept", "ssjf"]
    assert rows[0]["arrival"] == "gamma:2" and rows[0]["max_batch_tokens"] == 512


def test_bench_cli_rejects_bad_input(tmp_path: Path) -> None:
    assert (
        main(["bench", "--workload", "infercept-like", "--rates", "x", "--out", str(tmp_path)]) == 2
    )
    assert (
        main(
            [
                "bench",
                "--workload",
                "infercept-like",
                "--arrival",
                "gamma:0",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert (
        main(
            [
                "bench",
                "--workload",
                "infercept-like",
                "--backend",
                "nope",
                "--window",
                "1",
                "--workers",
                "1",
                "--no-progress",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )


def test_same_point_same_row_except_wall_time() -> None:
    p = BenchPoint(policy="mars", rate=3.0, seed=4, workload="infercept-like", window=10.0)
    a, b = run_sim_point(p)[0], run_sim_point(p)[0]
    for key in WALL_TIME_COLUMNS:
        a.pop(key), b.pop(key)
    assert a == b


def test_aggregate_averages_over_seeds() -> None:
    rows = [
        {"backend": "sim", "policy": "x", "rate": 1.0, "seed": 0, "goodput": 1.0, "stalled": False},
        {"backend": "sim", "policy": "x", "rate": 1.0, "seed": 1, "goodput": 2.0, "stalled": True},
        {"backend": "sim", "policy": "y", "rate": 1.0, "seed": 0, "goodput": 5.0, "stalled": False},
    ]
    agg = aggregate(rows)
    assert agg[0]["goodput"] == 1.5 and agg[0]["seed"] == [0, 1] and agg[0]["stalled"] is True
    assert agg[1]["goodput"] == 5.0 and agg[1]["num_seeds"] == 1
    assert "x" in format_table(agg)


def _fake_backend(point: BenchPoint) -> list[dict[str, object]]:
    return [{"policy": point.policy, "rate": point.rate, "seed": point.seed, "goodput": 1.0}]


def test_backends_are_pluggable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(runner.BACKENDS, "fake", "")  # undone after the test: unregistered
    register_backend("fake", f"{__name__}:_fake_backend")
    assert get_backend("fake") is _fake_backend
    pts = expand_points(
        BenchPoint("vllm", 1.0, backend="fake", workload="w"), ["vllm", "augserve"], [1.0, 2.0], [0]
    )
    rows = run_points(pts, workers=1, progress=False)
    assert [(r["policy"], r["rate"]) for r in rows] == [
        ("vllm", 1.0),
        ("vllm", 2.0),
        ("augserve", 1.0),
        ("augserve", 2.0),
    ]
    with pytest.raises(ValueError, match="module:function"):
        register_backend("bad", "nocolon")


def test_point_validation() -> None:
    assert arrival_cv("poisson") == 1.0 and arrival_cv("gamma:1.5") == 1.5
    with pytest.raises(ValueError, match="trace and workload"):
        BenchPoint("vllm", 1.0)
    with pytest.raises(ValueError, match="rate"):
        BenchPoint("vllm", 0.0, workload="w")


def test_compare_tables() -> None:
    from augserve.bench.compare import ratio_table, sweep_table

    rows = [
        {"policy": "vllm", "rate": 1.0, "goodput": 0.5, "ttft_mean": 2.0, "norm_latency_mean": 0.2},
        {"policy": "vllm", "rate": 2.0, "goodput": 0.0, "ttft_mean": 4.0, "norm_latency_mean": 0.4},
        {
            "policy": "augserve",
            "rate": 1.0,
            "goodput": 1.0,
            "ttft_mean": 1.0,
            "norm_latency_mean": 0.1,
        },
        {
            "policy": "augserve",
            "rate": 2.0,
            "goodput": 2.0,
            "ttft_mean": 1.0,
            "norm_latency_mean": 0.1,
        },
    ]
    rows[1]["num_met_slo"], rows[3]["num_met_slo"] = 3, 900
    text = ratio_table(rows)
    # 0 req/s is below the floor: a count beside the other, out of the geomean
    assert "| vllm | 2.00x | 1: 2.00x, 2: 900 vs 3 met the SLO | -62.5% | -62.5% | 6.5x" in text
    rows[1]["goodput"] = 0.04  # still below the 0.05 req/s floor
    assert "| vllm | 2.00x | 1: 2.00x, 2: 900 vs 3 met the SLO |" in ratio_table(rows)
    rows[1]["goodput"] = 0.5  # above it: in the geomean, sqrt(2 x 4)
    assert "| vllm | 2.83x | 1: 2.00x, 2: 4.00x |" in ratio_table(rows)
    assert sweep_table(rows).count("\n") == 5


def test_set_overrides_scheduler_fields(tmp_path: Path) -> None:
    from augserve.bench.runner import parse_overrides
    from augserve.core.request import ContextPolicy

    got = parse_overrides(
        [
            ("beta_high", "1.0"),
            ("dynamic_budget", "false"),
            ("swap_budget_blocks", "8"),
            ("forced_context_policy", "swap"),
            ("enable_prefix_caching", "false"),  # bool | None, default None
            ("slo_ttft", "0.5"),
        ]
    )
    assert got == {
        "beta_high": 1.0,
        "dynamic_budget": False,
        "swap_budget_blocks": 8,
        "forced_context_policy": ContextPolicy.SWAP,
        "enable_prefix_caching": False,
        "slo_ttft": 0.5,
    }
    with pytest.raises(ValueError, match="unknown scheduler option"):
        parse_overrides([("nope", "1")])
    with pytest.raises(ValueError, match="bad value"):
        parse_overrides([("scan_on", "maybe")])
    rc = main(
        [
            "bench",
            "--workload",
            "infercept-like",
            "--policies",
            "augserve",
            "--rates",
            "2",
            "--window",
            "5",
            "--workers",
            "1",
            "--no-progress",
            "--set",
            "beta_high=1.0",
            "--set",
            "dynamic_budget=false",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    row = json.loads((tmp_path / "results.json").read_text())["rows"][0]
    assert row["overrides"] == "beta_high=1.0,dynamic_budget=false"
    assert (
        main(
            ["bench", "--workload", "infercept-like", "--set", "beta_high", "--out", str(tmp_path)]
        )
        == 2
    )
