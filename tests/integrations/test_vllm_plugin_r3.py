"""The plugin's r3 (issue 40; docs/vllm-plugin.md, "r3, pre-registered"): r2 on a grid
across the knee with six fresh repeats, one part each, over several sittings. The parts
run so far are committed as they land and checked here (each its own repeat of the
committed config, on part 0's commit and machine). No reading is taken, and none is
tested, until all six are in: a capacity from part of the sample would be read early."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integrations.sessions_protocol import check_plugin_part

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-plugin-r3.json"
DATA = ROOT / "docs" / "data"
RAN = (0, 1, 2, 3, 4)  # parts committed so far, of 0..5
OURS = "vllm-plugin:augserve-slo+online"


def _part(k: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"vs-vllm-plugin-r3-part-{k}.json").read_text())
    return data


@pytest.mark.parametrize("k", RAN)
def test_each_part_ran_its_repeat_of_the_committed_config_on_one_commit_and_machine(
    k: int,
) -> None:
    part = _part(k)
    # quiet at every cell: the 1-minute load at a cell's start carries the cell run just before
    # it (no pause between cells); 2.5, not 2.0, a bound set after part 4's 2.4 (as r5's)
    check_plugin_part(part, CONFIG, k, OURS, "augserve-slo", max_load=2.5)
    assert part["commit"] == _part(0)["commit"] and part["cpu"] == _part(0)["cpu"]


def test_the_committed_parts_are_exactly_those_run_and_no_reading_yet() -> None:
    parts = sorted(DATA.glob("vs-vllm-plugin-r3-part-*.json"))
    assert [int(p.stem.rsplit("-", 1)[1]) for p in parts] == list(RAN)
    assert not (DATA / "vs-vllm-plugin-r3.json").exists()
