"""The agent-session comparison against real vLLM under the protocol, q4 (issue 36): the
parts run so far follow the config committed before them (byte for byte), with equal
memory and the SLO told, on a quiet machine, every cell finished; the attainments and
the per-repeat capacities docs/results-vs-vllm.md states are in them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integrations.sessions_protocol import (
    OURS,
    attainments,
    check_merged,
    check_part,
    part_crossing,
    read,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-agent-sessions-q4.json"
PARTS = {k: ROOT / "docs" / "data" / f"vs-vllm-agent-sessions-q4-part-{k}.json" for k in (0, 1, 2)}
# (rate, engine) -> SLO attainment in percent, as docs/results-vs-vllm.md states them
STATED = {
    0: {(0.2, "vllm"): 91, (0.2, OURS): 98, (0.4, "vllm"): 94, (0.4, OURS): 99,
        (0.6, "vllm"): 91, (0.6, OURS): 93, (0.8, "vllm"): 89, (0.8, OURS): 95,
        (1.0, "vllm"): 72, (1.0, OURS): 36},
    1: {(0.2, "vllm"): 98, (0.2, OURS): 98, (0.4, "vllm"): 99, (0.4, OURS): 98,
        (0.6, "vllm"): 91, (0.6, OURS): 96, (0.8, "vllm"): 80, (0.8, OURS): 91,
        (1.0, "vllm"): 64, (1.0, OURS): 54},
    2: {(0.2, "vllm"): 97, (0.2, OURS): 97, (0.4, "vllm"): 96, (0.4, OURS): 100,
        (0.6, "vllm"): 95, (0.6, OURS): 98, (0.8, "vllm"): 78, (0.8, OURS): 71,
        (1.0, "vllm"): 62, (1.0, OURS): 28},
}  # fmt: skip
CAPACITY = {  # each engine's 90% crossing in that repeat
    0: {"vllm": 0.66, OURS: 0.82},
    1: {"vllm": 0.61, OURS: 0.81},
    2: {"vllm": 0.66, OURS: 0.66},
}
MERGED = ROOT / "docs" / "data" / "vs-vllm-agent-sessions-q4.json"


@pytest.mark.parametrize("k", sorted(PARTS))
def test_each_part_ran_its_repeat_of_the_committed_config(k: int) -> None:
    check_part(read(PARTS[k]), CONFIG, k)


@pytest.mark.parametrize("k", sorted(PARTS))
def test_the_attainments_the_docs_state(k: int) -> None:
    assert attainments(read(PARTS[k])) == STATED[k]


@pytest.mark.parametrize("k", sorted(PARTS))
def test_the_capacities_the_docs_state(k: int) -> None:
    """Part 0: vLLM crosses 90% at 0.66 sessions/s, ours at 0.82 (1.24); part 1: 0.61
    and 0.81 (1.31); part 2: 0.66 and 0.66 (1.00)."""
    for engine, want in CAPACITY[k].items():
        cross = part_crossing(read(PARTS[k]), engine)
        assert cross.censored == "" and round(cross.rate, 2) == want


def test_the_merged_result_the_readme_states() -> None:
    """Means 98 / 99 / 96 / 86 / 39% vs 95 / 96 / 92 / 82 / 66%; capacities 0.72
    [0.55, 0.98] and vLLM's 0.64 [0.58, 0.71] sessions/s, a ratio of 1.11 whose
    per-repeat interval [0.77, 1.60] includes 1: the 1.5x target is not met."""
    merged = read(MERGED)
    means = check_merged(merged, CONFIG, [PARTS[k] for k in range(3)])
    assert means == {(0.2, OURS): 98, (0.4, OURS): 99, (0.6, OURS): 96, (0.8, OURS): 86,
                     (1.0, OURS): 39, (0.2, "vllm"): 95, (0.4, "vllm"): 96,
                     (0.6, "vllm"): 92, (0.8, "vllm"): 82, (1.0, "vllm"): 66}  # fmt: skip
    for engine, want in {OURS: (0.72, 0.55, 0.98), "vllm": (0.64, 0.58, 0.71)}.items():
        cap = merged["capacity"][engine]
        got = (cap["rate"], cap["interval"]["low"], cap["interval"]["high"])
        assert cap["censored"] == "" and tuple(round(x, 2) for x in got) == want
    ratio = merged["capacity_ratio"][OURS]
    assert round(ratio["ratio"], 2) == 1.11 and not ratio["censored"]
    iv = ratio["interval"]
    assert (round(iv["low"], 2), round(iv["high"], 2)) == (0.77, 1.6) and iv["low"] < 1.0
