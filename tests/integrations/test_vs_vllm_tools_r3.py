"""The quiet protocol run of the tool workload against real vLLM (issue 36): the file
follows its committed config, and the numbers docs/results-vs-vllm.md and the README
state are in it."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.integrations.protocol_runs import OURS, check_follows_config, check_quiet_cells

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "vs_vllm"))

from bench_tools_protocol import read  # noqa: E402

DATA = ROOT / "docs" / "data" / "vs-vllm-tools-protocol-r3.json"
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-tools-r3.json"


def test_the_run_follows_its_committed_config_with_equal_memory() -> None:
    check_follows_config(read(DATA), CONFIG, [1.5, 3.0, 4.5])


def test_every_cell_has_three_repeats_on_a_quiet_machine() -> None:
    check_quiet_cells(read(DATA), [1.5, 3.0, 4.5], max_load=2.0)


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
