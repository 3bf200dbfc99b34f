"""bench_tools.py under the comparison protocol: the config sets the run, and a small
synthetic run's result file (written by the same code path) has the protocol's fields."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("httpx")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "vs_vllm"))

import bench_tools_protocol as btp  # noqa: E402
from bench_tools_report import row_for  # noqa: E402
from tool_workload import Replay  # noqa: E402

from augserve.bench import protocol  # noqa: E402
from augserve.core.request import Request, RequestStatus, Segment  # noqa: E402

CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-tools.json"


def _raw(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": "t", "workload": "infercept", "time_scale": 1.0, "length_scale": 0.25,
        "rates": [1.0, 2.0], "duration_s": 10.0, "drain_s": 5.0, "seeds": [0, 1, 2],
        "memory": {"augserve_device_tokens": 2048, "augserve_host_tokens": 2048,
                   "baseline_tokens": 4096},
        "slo": {"ttft_s": 0.5, "norm_latency_s": 0.1, "source": "test config"},
        "settings": {"policies": ["vllm", "augserve"], "block_size": 32},
    }  # fmt: skip
    d.update(over)
    return d


def _args(raw: dict[str, Any]) -> argparse.Namespace:
    args = argparse.Namespace()
    btp.apply_config(args, protocol.ComparisonConfig.from_dict(raw))
    return args


def test_memory_is_equal_and_vllm_gets_the_whole_pool() -> None:
    args = _args(_raw())
    # augserve: device 2048 + host 2048; vLLM (no host pool of its own): 4096 on device
    assert (args.kv_tokens, args.swap_tokens, args.vllm_kv_tokens) == (2048, 2048, 4096)
    assert args.time_scale == 1.0 and args.rates == [1.0, 2.0] and args.predictors == ["online"]
    with pytest.raises(ValueError, match="memory.baseline_tokens"):
        _args(_raw(memory={"augserve_device_tokens": 4096, "augserve_host_tokens": 4096,
                           "baseline_tokens": 4096}))  # fmt: skip
    with pytest.raises(ValueError, match="unknown key.*kv_tokens"):
        _args(_raw(settings={"kv_tokens": 8192}))


def test_who_times_the_requests_is_a_checked_setting() -> None:
    assert _args(_raw()).measure == "client"  # the default: every run before r3's
    assert _args(_raw(settings={"measure": "server"})).measure == "server"
    with pytest.raises(ValueError, match="settings.measure must be one of client, server"):
        _args(_raw(settings={"measure": "proxy"}))
    with pytest.raises(ValueError, match="settings.measure: 'server' is read for the tool"):
        _args(_raw(workload="agent-sessions", settings={"measure": "server"}))


def _replay(met: int, n: int) -> Replay:
    """`n` one-segment requests at t = 0..n-1; the first `met` meet a 0.5 s TTFT SLO."""
    recs = []
    for i in range(n):
        r = Request(f"r{i}", float(i), 8, [Segment(4)])
        r.first_token_time = i + (0.1 if i < met else 0.9)
        r.finish_time = r.first_token_time + 0.1
        r.num_generated_tokens = 4
        r.status = RequestStatus.FINISHED_STOPPED
        recs.append(r)
    return Replay(recs, {})


def synthetic_rows(cfg: protocol.ComparisonConfig, args: argparse.Namespace) -> list[Any]:
    """Rows of a small run: 3 repeats x 2 rates x 2 engines, 10 requests each."""
    slo = btp.slo_config(cfg)
    met = {("vllm", 1.0): (10, 10, 9), ("vllm", 2.0): (6, 7, 5),
           ("augserve:augserve+online", 1.0): (10, 10, 10),
           ("augserve:augserve+online", 2.0): (10, 9, 10)}  # of 10 requests  # fmt: skip
    rows = []
    for rep in range(3):
        for k, rate in enumerate(cfg.rates):
            for engine in ("vllm", "augserve:augserve+online"):
                row = row_for(rate, engine, _replay(met[(engine, rate)][rep], 10), slo, args,
                              2.5 + rep, None)  # fmt: skip
                rows.append({**row, "repeat": rep, "seed": cfg.workload_seed(rep, k)})
    return rows


def test_a_synthetic_run_writes_the_protocols_result_file(tmp_path: Path) -> None:
    raw = _raw()
    cfg = protocol.ComparisonConfig.from_dict(raw)
    rows = synthetic_rows(cfg, _args(raw))
    result = btp.build_result(cfg, "cfg.json", "bench_tools.py --config cfg.json", rows)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(result))
    back = btp.read(path)
    for key in protocol.RESULT_FIELDS:
        assert key in back
    assert back["memory"] == {"augserve_device_tokens": 2048, "augserve_host_tokens": 2048,
                              "baseline_tokens": 4096}  # fmt: skip
    assert back["slo"] == {"ttft_s": 0.5, "norm_latency_s": 0.1, "source": "test config"}
    assert back["repeats"] == 3 and back["time_scale"] == 1.0 and back["load"] == [2.5, 4.5]
    cell = next(c for c in back["cells"] if c["engine"] == "vllm" and c["rate"] == 2.0)
    assert cell["seeds"] == [1, 1001, 2001] and cell["load"] == [2.5, 3.5, 4.5]
    assert cell["attainment"] == pytest.approx([0.6, 0.7, 0.5])
    assert cell["goodput"] == pytest.approx([0.6, 0.7, 0.5])  # met / 10 s of arrivals
    assert cell["attainment_interval"]["mean"] == pytest.approx(0.6)
    # vLLM per repeat: 1 + 0.1/0.4 = 1.25, 1 + 0.1/0.3 = 1.333, 1 + 0/0.4 = 1.0
    cap = back["capacity"]["vllm"]
    assert cap["per_repeat"] == pytest.approx([1.25, 4 / 3, 1.0])
    assert cap["rate"] == pytest.approx(1 + (0.9667 - 0.9) / (0.9667 - 0.6), abs=1e-3)
    ours = back["capacity"]["augserve:augserve+online"]
    assert ours["censored"] == "above" and ours["interval"]["low"] is None
    ratio = back["capacity_ratio"]["augserve:augserve+online"]
    assert ratio["censored"] is True and ratio["interval"]["low"] is None
    assert "capacity vllm: 1.18/s" in btp.cells_table(back)


def test_calibration_writes_the_slo_and_where_it_came_from() -> None:
    raw = _raw(slo=None)
    out = btp.calibrated(raw, [0.012, 0.010, 0.011], "cfg.json", "bench_tools.py --calibrate", 40)
    assert out["slo"]["ttft_s"] == pytest.approx(0.44)  # median 11 ms x 40
    assert out["slo"]["norm_latency_s"] == pytest.approx(0.11)
    assert out["slo"]["source"].startswith("cfg.json: calibration")
    assert out["calibration"]["vllm_iterations_s"] == [0.012, 0.010, 0.011]


def test_the_committed_config_is_calibrated_with_equal_memory() -> None:
    cfg = protocol.load_config(CONFIG)
    m = cfg.memory
    assert m.augserve_device_tokens + m.augserve_host_tokens == m.baseline_tokens
    assert cfg.time_scale == 1.0 and len(cfg.seeds) >= 3
    assert "calibration" in cfg.slo.source and cfg.calibration["vllm_iterations_s"]


# whole runs and runs merged from parts; a part holds rows only (bench_parts.py), and
# its own run's test checks it
PROTOCOL_RESULTS = sorted(
    p for p in (ROOT / "docs" / "data").glob("vs-vllm-*-protocol*.json") if "-part-" not in p.name
)


@pytest.mark.parametrize("path", PROTOCOL_RESULTS, ids=lambda p: p.name)
def test_committed_protocol_results_have_every_field(path: Path) -> None:
    result = btp.read(path)  # the schema: command, commit, date, load, memory, slo, ...
    assert result["repeats"] >= protocol.MIN_REPEATS
    m = result["memory"]
    assert m["augserve_device_tokens"] + m["augserve_host_tokens"] == m["baseline_tokens"]
    named = result["slo"]["source"].split(":", 1)[0]  # the committed config it came from
    assert named.startswith("benchmarks/configs/") and (ROOT / named).is_file()
    assert protocol.load_config(ROOT / result["config"]).slo.source == result["slo"]["source"]
    for cell in result["cells"]:
        assert len(set(cell["seeds"])) == result["repeats"]
        assert cell["attainment_interval"]["n"] == result["repeats"]
    assert "vllm" in result["capacity"]


def test_a_resumed_run_plans_only_the_cells_the_dead_one_left(tmp_path: Path) -> None:
    names, rates = ["vllm", "augserve:augserve-slo+online"], [0.2, 0.4, 0.6, 0.8]
    full = btp.cell_plan(rates, names, [0], set())
    assert [(k, todo) for _, k, _, todo in full] == [
        (0, names), (1, names[::-1]), (2, names), (3, names[::-1]),
    ]  # fmt: skip  # who goes first alternates
    out = tmp_path / "part-0.json"
    assert btp.kept_rows(out) == []
    ran = [{"rate": r, "engine": n, "repeat": 0} for _, _, r, todo in full[:3] for n in todo]
    ran.append({"rate": 0.8, "engine": names[1], "repeat": 0})  # died inside rate 0.8
    out.with_suffix(".rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ran))
    kept = btp.kept_rows(out)
    assert kept == ran
    done = {(r["rate"], r["engine"], r["repeat"]) for r in kept}
    assert btp.cell_plan(rates, names, [0], done) == [(0, 3, 0.8, ["vllm"])]
    assert btp.cell_plan(rates, names, [1], done)[0] == (1, 0, 0.2, names[::-1])
