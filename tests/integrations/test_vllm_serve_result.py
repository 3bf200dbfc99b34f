"""The committed run of `augserve serve --engine vllm` against plain vLLM (issue 40's
must-show, docs/results-vllm-plugin.md): the file follows the protocol (docs/benchmarking.md)
and what the docs say about it is in it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "vs_vllm"))

from bench_tools_protocol import read  # noqa: E402

DATA = ROOT / "docs" / "data" / "vs-vllm-serve-engine-vllm.json"
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-serve-engine-vllm.json"
OURS = "augserve-vllm:augserve+online"


def test_the_run_follows_its_committed_config() -> None:
    result, cfg = read(DATA), json.loads(CONFIG.read_text())
    assert result["config"] == "benchmarks/configs/vs-vllm-serve-engine-vllm.json"
    assert cfg["settings"]["augserve_engine"] == "vllm"
    assert result["rates"] == cfg["rates"] and result["seeds"] == cfg["seeds"]
    assert result["repeats"] == 3 and result["memory"] == cfg["memory"]
    assert (result["slo"]["ttft_s"], result["slo"]["norm_latency_s"]) == (
        cfg["slo"]["ttft_s"],
        cfg["slo"]["norm_latency_s"],
    )
    # our server ran on vLLM (the same KV blocks as vLLM's own server), the calls on it
    assert "--engine vllm" in result["servers"][OURS]
    blocks = cfg["memory"]["baseline_tokens"] // cfg["settings"]["block_size"]
    assert f"--num-device-blocks {blocks}" in result["servers"][OURS]
    assert f"--num-gpu-blocks-override {blocks}" in result["servers"]["vllm"]


def test_every_cell_has_three_repeats_and_its_load() -> None:
    result = read(DATA)
    cells = {(c["rate"], c["engine"]): c for c in result["cells"]}
    assert set(cells) == {(r, e) for r in (2.0, 4.0) for e in ("vllm", OURS)}
    for c in cells.values():
        assert len(c["attainment"]) == 3 and len(c["load"]) == 3
        assert all(x > 0 for x in c["load"])  # the busy machine, recorded
    rows = [r for r in result["rows"] if r["engine"] == OURS]
    assert len(rows) == 6 and all(not r["errors"] for r in rows)


def test_the_capacity_ratio_the_docs_state_and_that_it_is_not_established() -> None:
    """docs/results-vllm-plugin.md: per repeat 1.00, 0.58, 1.00; censored, no interval."""
    ratio = read(DATA)["capacity_ratio"][OURS]
    assert [round(x, 2) for x in ratio["per_repeat"]] == [1.0, 0.58, 1.0]
    assert round(ratio["ratio"], 2) == 1.28 and round(ratio["interval"]["mean"], 2) == 0.86
    assert ratio["censored"] and ratio["interval"]["low"] is None  # not established
