"""The second quiet protocol run of the tool workload against real vLLM (issue 36): the
file follows its committed config, and the numbers docs/results-vs-vllm.md and the
README state are in it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.integrations.protocol_runs import OURS, check_follows_config, check_quiet_cells

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "vs_vllm"))

from bench_tools_protocol import capacities, read  # noqa: E402

DATA = ROOT / "docs" / "data" / "vs-vllm-tools-protocol-r4.json"
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-tools-r4.json"
R3 = ROOT / "benchmarks" / "configs" / "vs-vllm-tools-r3.json"


def test_the_run_follows_its_committed_config_with_r3_s_slo_and_equal_memory() -> None:
    result = read(DATA)
    check_follows_config(result, CONFIG, [1.5, 4.0, 6.5])
    assert result["slo"] == json.loads(R3.read_text())["slo"]  # r3's, not re-derived


def test_every_cell_has_three_repeats_on_a_quiet_machine() -> None:
    check_quiet_cells(read(DATA), [1.5, 4.0, 6.5], max_load=1.5)


def test_the_recomputed_capacities_are_the_cells_own() -> None:
    """The capacities were recomputed after the run (to add `lower_bound`): they are
    what the cells give, so nothing but the new fields changed."""
    result = read(DATA)
    again = capacities(result["cells"])
    assert again["capacity"] == result["capacity"]
    assert again["capacity_ratio"] == result["capacity_ratio"]


def test_the_capacities_and_the_ratio_the_docs_state() -> None:
    """docs/results-vs-vllm.md: vLLM 2.09 req/s [1.00, 3.01], augserve censored above
    6.5 in every repeat; ratio at least 3.11x, per repeat 2.73, 3.16, 4.12 (all lower
    bounds), their conservative lower end 1.57x."""
    result = read(DATA)
    v, a = result["capacity"]["vllm"], result["capacity"][OURS]
    assert round(v["rate"], 2) == 2.09 and not v["censored"]
    assert (round(v["interval"]["low"], 2), round(v["interval"]["high"], 2)) == (1.0, 3.01)
    assert [round(x, 2) for x in v["per_repeat"]] == [2.38, 2.06, 1.58]
    assert a["censored"] == "above" and a["per_repeat_censored"] == ["above"] * 3
    assert a["per_repeat"] == [6.5, 6.5, 6.5]
    ratio = result["capacity_ratio"][OURS]
    assert round(ratio["ratio"], 2) == 3.11 and ratio["censored"]
    assert [round(x, 2) for x in ratio["per_repeat"]] == [2.73, 3.16, 4.12]
    assert ratio["lower_bound"]["mean"] == pytest.approx(3.34, abs=0.005)
    assert round(ratio["lower_bound"]["low"], 2) == 1.57
    att = {(c["rate"], c["engine"]): c["attainment_interval"]["mean"] for c in result["cells"]}
    assert round(att[(4.0, "vllm")], 2) == 0.68 and round(att[(4.0, OURS)], 2) == 0.99
    assert round(att[(6.5, "vllm")], 2) == 0.75 and round(att[(6.5, OURS)], 2) == 0.98


def test_augserve_kept_most_calls_kv_with_no_host_pool() -> None:
    rows = [r for r in read(DATA)["rows"] if r["engine"] == OURS]
    policies = [r["metrics"]["call_policies"] for r in rows]
    kept = sum(p.get("preserve", 0) for p in policies)
    dropped = sum(p.get("discard", 0) for p in policies)
    assert (kept, dropped, sum(p.get("swap", 0) for p in policies)) == (4190, 645, 0)
