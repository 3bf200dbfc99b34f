"""The agent-session comparison against real vLLM under the protocol, q4 (issue 36): the
parts run so far follow the config committed before them (byte for byte), with equal
memory and the SLO told, on a quiet machine, every cell finished; the attainments and
the per-repeat capacities docs/results-vs-vllm.md states are in them."""

from __future__ import annotations

from pathlib import Path

import pytest

from augserve.bench.capacity import crossing
from tests.integrations.sessions_protocol import OURS, attainments, check_part, read

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-agent-sessions-q4.json"
PARTS = {k: ROOT / "docs" / "data" / f"vs-vllm-agent-sessions-q4-part-{k}.json" for k in (0, 1)}
# (rate, engine) -> SLO attainment in percent, as docs/results-vs-vllm.md states them
STATED = {
    0: {(0.2, "vllm"): 91, (0.2, OURS): 98, (0.4, "vllm"): 94, (0.4, OURS): 99,
        (0.6, "vllm"): 91, (0.6, OURS): 93, (0.8, "vllm"): 89, (0.8, OURS): 95,
        (1.0, "vllm"): 72, (1.0, OURS): 36},
    1: {(0.2, "vllm"): 98, (0.2, OURS): 98, (0.4, "vllm"): 99, (0.4, OURS): 98,
        (0.6, "vllm"): 91, (0.6, OURS): 96, (0.8, "vllm"): 80, (0.8, OURS): 91,
        (1.0, "vllm"): 64, (1.0, OURS): 54},
}  # fmt: skip
CAPACITY = {0: {"vllm": 0.66, OURS: 0.82}, 1: {"vllm": 0.61, OURS: 0.81}}  # each engine's 90% crossing in that repeat


@pytest.mark.parametrize("k", sorted(PARTS))
def test_each_part_ran_its_repeat_of_the_committed_config(k: int) -> None:
    check_part(read(PARTS[k]), CONFIG, k)


@pytest.mark.parametrize("k", sorted(PARTS))
def test_the_attainments_the_docs_state(k: int) -> None:
    assert attainments(read(PARTS[k])) == STATED[k]


@pytest.mark.parametrize("k", sorted(PARTS))
def test_the_capacities_the_docs_state(k: int) -> None:
    """Part 0: vLLM crosses 90% at 0.66 sessions/s, ours at 0.82 (1.24); part 1: 0.61
    and 0.81 (1.31). Per repeat; the protocol's interval comes from all three."""
    rows = read(PARTS[k])["rows"]
    for engine, want in CAPACITY[k].items():
        pts = sorted((r["rate"], r["metrics"]["slo_attainment"]) for r in rows
                     if r["engine"] == engine)  # fmt: skip
        cross = crossing([p[0] for p in pts], [p[1] for p in pts], 0.9)
        assert cross.censored == "" and round(cross.rate, 2) == want
