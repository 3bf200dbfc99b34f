"""The quiet protocol run of the tool workload against real vLLM (issue 36): the file
follows its committed config, and the numbers docs/results-vs-vllm.md and the README
state are in it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "vs_vllm"))

from bench_tools_protocol import read  # noqa: E402

DATA = ROOT / "docs" / "data" / "vs-vllm-tools-protocol-r3.json"
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-tools-r3.json"
OURS = "augserve:augserve+online"


def test_the_run_follows_its_committed_config_with_equal_memory() -> None:
    result, cfg = read(DATA), json.loads(CONFIG.read_text())
    assert result["config"] == "benchmarks/configs/vs-vllm-tools-r3.json"
    assert result["rates"] == cfg["rates"] == [1.5, 3.0, 4.5]
    assert result["seeds"] == cfg["seeds"] and result["repeats"] == 3
    assert result["time_scale"] == 1.0 and result["memory"] == cfg["memory"]
    assert result["memory"]["augserve_host_tokens"] == 0  # no host pool for anyone
    assert result["slo"] == cfg["slo"]  # fixed before the run, never re-derived
    assert "--predictor online" in result["servers"][OURS]
    assert "--num-device-blocks 128" in result["servers"][OURS]
    assert "--num-gpu-blocks-override 128" in result["servers"]["vllm"]
    # the calibration ran before the comparison, on the commit the config names
    assert cfg["calibration"]["date"] < result["date"]


def test_every_cell_has_three_repeats_on_a_quiet_machine() -> None:
    result = read(DATA)
    cells = {(c["rate"], c["engine"]): c for c in result["cells"]}
    assert set(cells) == {(r, e) for r in (1.5, 3.0, 4.5) for e in ("vllm", OURS)}
    for c in cells.values():
        assert len(c["attainment"]) == 3 and len(c["load"]) == 3
        assert max(c["load"]) < 2.0  # quiet: nothing else ran (1-minute load average)
    assert all(not r["errors"] for r in result["rows"])


def test_the_capacities_the_docs_state() -> None:
    """docs/results-vs-vllm.md: vLLM 2.57 req/s [0.46, 5.16], augserve censored above
    4.5 (per repeat 4.43, 4.5, 4.5), ratio at least 1.75x (no interval)."""
    result = read(DATA)
    v, a = result["capacity"]["vllm"], result["capacity"][OURS]
    assert round(v["rate"], 2) == 2.57 and not v["censored"]
    assert (round(v["interval"]["low"], 2), round(v["interval"]["high"], 2)) == (0.46, 5.16)
    assert [round(x, 2) for x in v["per_repeat"]] == [3.9, 2.27, 2.26]
    assert a["censored"] == "above" and a["rate"] == 4.5
    assert [round(x, 2) for x in a["per_repeat"]] == [4.43, 4.5, 4.5]
    ratio = result["capacity_ratio"][OURS]
    assert round(ratio["ratio"], 2) == 1.75 and ratio["censored"]
    assert ratio["interval"]["low"] is None  # censored: no interval
    att = {(c["rate"], c["engine"]): c["attainment_interval"]["mean"] for c in result["cells"]}
    assert round(att[(3.0, "vllm")], 2) == 0.87 and round(att[(3.0, OURS)], 2) == 0.98
    assert round(att[(4.5, "vllm")], 2) == 0.89 and round(att[(4.5, OURS)], 2) == 0.96


def test_augserve_kept_most_calls_kv_and_no_host_pool_was_there_to_swap_to() -> None:
    rows = [r for r in read(DATA)["rows"] if r["engine"] == OURS]
    kept = sum(r["metrics"]["call_policies"].get("preserve", 0) for r in rows)
    dropped = sum(r["metrics"]["call_policies"].get("discard", 0) for r in rows)
    swapped = sum(r["metrics"]["call_policies"].get("swap", 0) for r in rows)
    assert (kept, dropped, swapped) == (3185, 356, 0)
