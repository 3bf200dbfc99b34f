"""Points run as Ray tasks give the same rows as the local process pool, point for point.

Starts a private local Ray instance (2 CPUs, no dashboard) for a small sweep and
shuts it down. Skipped when the `ray` extra is not installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from augserve.bench.pool import run_points
from augserve.bench.reproduce.probes import OCCUPANCY
from augserve.bench.runner import WALL_TIME_COLUMNS, BenchPoint, expand_points

ray = pytest.importorskip("ray")


def _strip(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{k: v for k, v in r.items() if k not in WALL_TIME_COLUMNS} for r in rows]


def test_ray_sweep_equals_the_local_run_point_for_point(tmp_path: Path) -> None:
    from augserve.bench.ray_pool import run_points_ray

    base = BenchPoint(policy="augserve", rate=1.0, workload="infercept-like", window=20.0)
    points = expand_points(base, ["vllm", "infercept", "augserve"], [2.0, 5.0], [0])
    points.append(BenchPoint(policy="mars", rate=4.0, workload="toolbench-like", window=20.0,
                             arrival="gamma:2", drain=5.0, backend=OCCUPANCY))  # fmt: skip
    seen: list[int] = []
    remote = run_points_ray(
        points, "local", workers=2, progress=False, on_result=lambda i, rows: seen.append(i)
    )
    assert not ray.is_initialized()  # the instance it started is shut down
    local = run_points(points, workers=1, progress=False)
    assert sorted(seen) == list(range(len(points)))
    assert len(remote) == len(local) == len(points)
    for a, b in zip(_strip(remote), _strip(local), strict=True):
        assert a == b
    assert remote[-1]["occ_device_pct"] and remote[0]["policy"] == "vllm"


def test_ray_auto_without_a_cluster_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from augserve.cli import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no cluster's address file to find there
    args = ["reproduce", "--quick", "--only", "overhead", "--ray", "auto", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "augserve: error: --ray auto: no Ray cluster there" in err
