"""benchmarks/own_policy.py resumes: a finished point is read back from its cache, and only
the points not finished before are run again."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from augserve.bench.runner import BenchPoint
from augserve.sched.policies import POLICIES

ROOT = Path(__file__).resolve().parents[2]


def _module() -> Any:
    spec = importlib.util.spec_from_file_location("own_policy", ROOT / "benchmarks/own_policy.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["own_policy"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_second_run_computes_only_the_new_points(tmp_path: Path, monkeypatch: Any) -> None:
    # the script registers its ablation policies on import: keep them out of other tests
    monkeypatch.setattr("augserve.sched.policies.POLICIES", dict(POLICIES))
    op = _module()
    ran: list[BenchPoint] = []

    def fake_run_points(points: list[BenchPoint], workers: int, on_result: Any, desc: str) -> Any:
        for j, p in enumerate(points):
            ran.append(p)
            on_result(j, [{"policy": p.policy, "rate": p.rate, "goodput": p.rate * 2}])
        return []

    monkeypatch.setattr(op, "run_points", fake_run_points)
    a, b = (BenchPoint("augserve", r, workload="infercept", window=10.0) for r in (1.0, 2.0))
    first = op.run_cached([a], 1, tmp_path, "t")
    assert ran == [a] and first == [{"policy": "augserve", "rate": 1.0, "goodput": 2.0}]
    ran.clear()
    second = op.run_cached([b, a], 1, tmp_path, "t")
    assert ran == [b]  # a came from the cache
    assert [r["rate"] for r in second] == [2.0, 1.0]  # in point order
    assert [r["goodput"] for r in second] == [4.0, 2.0]
