"""The simulator's fingerprint stays put: the cheapest runs of `benchmarks/sim_fingerprint.py`
recomputed against the committed hashes (docs/design.md, one scheduler for every executor).

A change that alters any scheduling decision in these runs (who runs, when, which context
policy a call gets, what is preempted or swapped) changes a hash. If the change is meant,
rerun the script and commit the new JSON with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs/data/refactor-fingerprint-before.json"
CHEAP = ("vllm-tight", "infercept-tight", "augserve-tight", "vllm-apc-sessions")


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "sim_fingerprint", ROOT / "benchmarks/sim_fingerprint.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", CHEAP)
def test_run_matches_the_committed_fingerprint(name: str) -> None:
    script = _script()
    runs = {r.name: r for r in script.RUNS}
    committed = json.loads(COMMITTED.read_text())["runs"][name]
    got = script.fingerprint(runs[name])
    assert got["stats"] == committed["stats"]
    assert (got["requests"], got["finished"], got["preemptions"]) == (
        committed["requests"], committed["finished"], committed["preemptions"],
    )  # fmt: skip
    assert got["sha256"] == committed["sha256"]


def test_the_fingerprint_covers_every_policy_and_kv_pressure() -> None:
    runs = json.loads(COMMITTED.read_text())["runs"]
    policies = {r["run"]["policy"] for r in runs.values()}
    assert {
        "vllm",
        "infercept",
        "ssjf",
        "mars",
        "augserve",
        "augserve-slo",
        "continuum",
    } <= policies
    tight = [r for r in runs.values() if r["run"]["overrides"]]
    assert all(r["preemptions"] > 0 for r in tight)
    assert sum(r["stats"]["swapped_blocks"] > 0 for r in tight) >= 6
    assert len({r["sha256"] for r in runs.values()}) == len(runs)  # no two runs alike


def test_the_refactor_of_issue_39_left_every_run_bit_identical() -> None:
    before = json.loads(COMMITTED.read_text())["runs"]
    after = json.loads((ROOT / "docs/data/refactor-fingerprint-after.json").read_text())["runs"]
    assert sorted(before) == sorted(after) and len(before) >= 8
    assert all(before[k]["sha256"] == after[k]["sha256"] for k in before)
