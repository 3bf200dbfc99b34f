"""The agent-session comparison against real vLLM under the protocol, q5 (issue 36): the
parts run so far follow the config committed before them (byte for byte), with equal
memory and the SLO told, every cell finished, load under 2; the attainments and the
crossings docs/results-vs-vllm.md states are in them. Part 0 of 3 has run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integrations.sessions_protocol import (
    OURS,
    attainments,
    check_part,
    part_crossing,
    read,
)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-agent-sessions-q5.json"
PARTS = {k: ROOT / "docs" / "data" / f"vs-vllm-agent-sessions-q5-part-{k}.json" for k in (0,)}
# (rate, engine) -> SLO attainment in percent, as docs/results-vs-vllm.md states them
STATED = {
    0: {(0.2, "vllm"): 96, (0.2, OURS): 100, (0.4, "vllm"): 93, (0.4, OURS): 98,
        (0.6, "vllm"): 92, (0.6, OURS): 96, (0.8, "vllm"): 88, (0.8, OURS): 95,
        (1.0, "vllm"): 77, (1.0, OURS): 92},
}  # fmt: skip


@pytest.mark.parametrize("k", sorted(PARTS))
def test_each_part_ran_its_repeat_of_the_committed_config(k: int) -> None:
    check_part(read(PARTS[k]), CONFIG, k)


@pytest.mark.parametrize("k", sorted(PARTS))
def test_the_attainments_the_docs_state(k: int) -> None:
    assert attainments(read(PARTS[k])) == STATED[k]


def test_part_0s_crossings() -> None:
    """vLLM crosses 90% at 0.70 sessions/s; ours never does on the grid (92% at 1.0):
    censored above, so part 0's ratio is at least 1.0 / 0.70 = 1.44."""
    got = {engine: part_crossing(read(PARTS[0]), engine) for engine in ("vllm", OURS)}
    assert got["vllm"].censored == "" and round(got["vllm"].rate, 2) == 0.70
    assert got[OURS].censored == "above" and got[OURS].rate == 1.0
    assert round(got[OURS].rate / got["vllm"].rate, 2) == 1.44
