"""The agent-session comparison against real vLLM under the protocol, q5 (issue 36): the
three parts follow the config committed before them (byte for byte), on the same code
(part 0's commit, each part run from a checkout of it), with equal memory and the SLO
told, every cell finished, load under 2; the attainments, per-repeat capacities and
the merged result docs/results-vs-vllm.md and the README state are in them."""

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
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-agent-sessions-q5.json"
PARTS = {k: ROOT / "docs" / "data" / f"vs-vllm-agent-sessions-q5-part-{k}.json" for k in (0, 1, 2)}
MERGED = ROOT / "docs" / "data" / "vs-vllm-agent-sessions-q5.json"
# (rate, engine) -> SLO attainment in percent, as docs/results-vs-vllm.md states them
STATED = {
    0: {(0.2, "vllm"): 96, (0.2, OURS): 100, (0.4, "vllm"): 93, (0.4, OURS): 98,
        (0.6, "vllm"): 92, (0.6, OURS): 96, (0.8, "vllm"): 88, (0.8, OURS): 95,
        (1.0, "vllm"): 77, (1.0, OURS): 92},
    1: {(0.2, "vllm"): 94, (0.2, OURS): 98, (0.4, "vllm"): 95, (0.4, OURS): 99,
        (0.6, "vllm"): 81, (0.6, OURS): 98, (0.8, "vllm"): 79, (0.8, OURS): 96,
        (1.0, "vllm"): 55, (1.0, OURS): 79},
    2: {(0.2, "vllm"): 95, (0.2, OURS): 97, (0.4, "vllm"): 95, (0.4, OURS): 99,
        (0.6, "vllm"): 95, (0.6, OURS): 97, (0.8, "vllm"): 78, (0.8, OURS): 91,
        (1.0, "vllm"): 55, (1.0, OURS): 41},
}  # fmt: skip
# each engine's 90% crossing in that repeat ("above": ours never crossed on the grid)
CAPACITY = {
    0: {"vllm": (0.70, ""), OURS: (1.0, "above")},
    1: {"vllm": (0.47, ""), OURS: (0.87, "")},
    2: {"vllm": (0.66, ""), OURS: (0.80, "")},
}


@pytest.mark.parametrize("k", sorted(PARTS))
def test_each_part_ran_its_repeat_of_the_committed_config(k: int) -> None:
    check_part(read(PARTS[k]), CONFIG, k)


def test_every_part_ran_part_0s_code() -> None:
    assert {read(p)["commit"] for p in PARTS.values()} == {"bef888f"}


@pytest.mark.parametrize("k", sorted(PARTS))
def test_the_attainments_the_docs_state(k: int) -> None:
    assert attainments(read(PARTS[k])) == STATED[k]


@pytest.mark.parametrize("k", sorted(PARTS))
def test_the_capacities_the_docs_state(k: int) -> None:
    for engine, (rate, censored) in CAPACITY[k].items():
        cross = part_crossing(read(PARTS[k]), engine)
        assert cross.censored == censored and round(cross.rate, 2) == rate


def test_the_merged_result_the_readme_states() -> None:
    """Means 98 / 99 / 97 / 94 / 71% vs 95 / 94 / 89 / 81 / 62%; the mean curves cross
    90% at 0.83 (ours) and 0.57 (vLLM) sessions/s, a ratio of 1.46. Part 0's crossing
    of ours is censored above the grid, so the per-repeat ratios (1.44 or more, 1.85,
    1.22) give a lower bound whose 95% lower end, 0.71, is below 1: the 1.5x target
    with the interval above 1 is not met."""
    merged = read(MERGED)
    means = check_merged(merged, CONFIG, [PARTS[k] for k in range(3)])
    assert means == {(0.2, OURS): 98, (0.4, OURS): 99, (0.6, OURS): 97, (0.8, OURS): 94,
                     (1.0, OURS): 71, (0.2, "vllm"): 95, (0.4, "vllm"): 94,
                     (0.6, "vllm"): 89, (0.8, "vllm"): 81, (1.0, "vllm"): 62}  # fmt: skip
    cap = merged["capacity"]
    assert cap[OURS]["censored"] == "repeat" and round(cap[OURS]["rate"], 2) == 0.83
    assert cap["vllm"]["censored"] == "" and round(cap["vllm"]["rate"], 2) == 0.57
    iv = cap["vllm"]["interval"]
    assert (round(iv["low"], 2), round(iv["high"], 2)) == (0.31, 0.91)
    ratio = merged["capacity_ratio"][OURS]
    assert round(ratio["ratio"], 2) == 1.46 and ratio["censored"]
    assert [round(r, 2) for r in ratio["per_repeat"]] == [1.44, 1.85, 1.22]
    bound = ratio["lower_bound"]
    assert round(bound["mean"], 2) == 1.5 and round(bound["low"], 2) == 0.71 < 1.0
