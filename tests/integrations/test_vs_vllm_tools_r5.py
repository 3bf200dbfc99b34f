"""The tool headline's r5 (issue 36; docs/results-vs-vllm.md, "r5, pre-registered"): r4
with 9.0 and 12.0 req/s and three fresh repeats, one part each, possibly over several
sittings. The parts run so far are committed as they land and checked here (each its own
repeat of the committed config, on part 0's commit and machine, quiet). No reading is
taken, and none is tested, until all three are in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integrations.protocol_runs import check_part

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-tools-r5.json"
DATA = ROOT / "docs" / "data"
RAN = (0,)  # parts committed so far, of 0..2


def _part(k: int) -> dict[str, Any]:
    path = DATA / f"vs-vllm-tools-protocol-r5-part-{k}.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.mark.parametrize("k", RAN)
def test_each_part_ran_its_repeat_of_the_committed_config_on_one_commit_and_machine(
    k: int,
) -> None:
    part = _part(k)
    check_part(part, CONFIG, k)
    assert part["commit"] == _part(0)["commit"] and part["cpu"] == _part(0)["cpu"]


def test_the_committed_parts_are_exactly_those_run_and_no_reading_yet() -> None:
    parts = sorted(DATA.glob("vs-vllm-tools-protocol-r5-part-*.json"))
    assert [int(p.stem.rsplit("-", 1)[1]) for p in parts] == list(RAN)
    assert not (DATA / "vs-vllm-tools-protocol-r5.json").exists()
