"""The committed run of BFCL's multi-turn conversations as agent sessions against real
vLLM (issue 37): it follows its config, and each row holds the per-turn TTFT and the
prefix reuse docs/bfcl.md states."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "vs_vllm"))

from bench_tools_protocol import read  # noqa: E402

DATA = ROOT / "docs" / "data" / "vs-vllm-bfcl-multi-turn.json"
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-bfcl-multi-turn.json"
OURS = "augserve:augserve+online"


def test_the_run_follows_its_config() -> None:
    result, cfg = read(DATA), json.loads(CONFIG.read_text())
    assert result["workload"] == cfg["workload"] == "bfcl-multi-turn"
    assert result["rates"] == [0.2] and result["repeats"] == 3
    assert result["memory"] == cfg["memory"] and result["slo"] == cfg["slo"]
    assert "--enable-prompt-tokens-details" in result["servers"]["vllm"]
    assert all(not r["errors"] for r in result["rows"])
    assert max(r["load_avg_1min"] for r in result["rows"]) < 2.0  # quiet


def test_every_row_reports_turn_ttft_and_prefix_reuse_from_the_servers_usage() -> None:
    rows = read(DATA)["rows"]
    assert len(rows) == 6
    by = {(r["engine"], r["seed"]): r["metrics"] for r in rows}
    for (engine, seed), m in by.items():
        other = by[("vllm" if engine == OURS else OURS, seed)]
        assert m["turns"] == other["turns"] > 80  # the same sessions, turn for turn
        assert 0.6 < m["prefix_reuse"] < 0.95  # each turn re-reads its session
        assert 0.1 < m["first_turn_prefix_reuse"] < 0.4  # shared system prompts
        assert m["first_turn_ttft_p50"] > m["later_turn_ttft_p50"]
    # docs/bfcl.md: augserve's reuse is the higher in every repeat, its later turns faster
    for seed in (0, 1000, 2000):
        ours, theirs = by[(OURS, seed)], by[("vllm", seed)]
        assert ours["prefix_reuse"] > theirs["prefix_reuse"]
        assert ours["later_turn_ttft_p50"] < theirs["later_turn_ttft_p50"]
    reuse = sorted(round(by[(OURS, s)]["prefix_reuse"], 2) for s in (0, 1000, 2000))
    assert reuse == [0.75, 0.84, 0.87]
    reuse = sorted(round(by[("vllm", s)]["prefix_reuse"], 2) for s in (0, 1000, 2000))
    assert reuse == [0.7, 0.8, 0.83]
