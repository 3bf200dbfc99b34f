"""The tool headline's r5 (issue 36; docs/results-vs-vllm.md, "r5, pre-registered"): r4
with 9.0 and 12.0 req/s and three fresh repeats, one part each, possibly over several
sittings. Sittings land on two machine kinds, so r5 runs as one set of parts per kind
(a rule fixed before any part ran on the second kind): each set's parts share one commit
and one CPU, and r5 is read once, on the first kind whose set holds all three parts.
The parts run so far are committed as they land and checked here. No reading is taken,
and none is tested, until one set is whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integrations.protocol_runs import check_part

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-tools-r5.json"
DATA = ROOT / "docs" / "data"
# parts committed so far, of 0..2, per set: file infix -> (AVX-512?, parts)
SETS: dict[str, tuple[bool, tuple[int, ...]]] = {
    "": (False, (0,)),  # the AVX2-only AMD EPYC, where part 0 ran first
    "avx512-": (True, (0, 1)),  # the AMD EPYC with AVX-512
}
COMMIT = "5efecf3"  # the commit that holds the config: every part of every set runs it


def _part(infix: str, k: int) -> dict[str, Any]:
    path = DATA / f"vs-vllm-tools-protocol-r5-{infix}part-{k}.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.mark.parametrize(
    ("infix", "k"), [(infix, k) for infix, (_, ran) in SETS.items() for k in ran]
)
def test_each_part_ran_its_repeat_of_the_committed_config_on_its_sets_commit_and_machine(
    infix: str, k: int
) -> None:
    avx512, ran = SETS[infix]
    part = _part(infix, k)
    check_part(part, CONFIG, k)
    assert part["commit"].startswith(COMMIT)
    assert part["cpu"]["flags"]["avx512f"] is avx512 and part["cpu"]["flags"]["avx2"]
    assert all(_part(infix, j)["cpu"] == part["cpu"] for j in ran)  # one kind per set


def test_the_committed_parts_are_exactly_those_run_and_no_reading_yet() -> None:
    for infix, (_, ran) in SETS.items():
        pattern = f"vs-vllm-tools-protocol-r5-{infix}part-*.json"
        parts = sorted(DATA.glob(pattern))
        assert [int(p.stem.rsplit("-", 1)[1]) for p in parts] == list(ran)
    assert all(len(ran) < 3 for _, ran in SETS.values())  # no set whole: no reading
    assert not list(DATA.glob("vs-vllm-tools-protocol-r5.json"))
    assert not list(DATA.glob("vs-vllm-tools-protocol-r5-avx512.json"))
