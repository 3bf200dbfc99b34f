"""`augserve reproduce --ray local`: the points run as Ray tasks on a local Ray instance
give the same rows as the local process pool, point for point.

One private Ray instance (2 CPUs, no dashboard) for a small sweep (10 points), shut
down at the end. Skipped when the `ray` extra is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from augserve.bench.reproduce import spec
from augserve.bench.runner import WALL_TIME_COLUMNS
from augserve.cli import main

ray = pytest.importorskip("ray")


def _points(out: Path) -> dict[str, dict[str, Any]]:
    """Cached point file name -> its row, less the columns that time this machine."""
    rows = {}
    for path in sorted((out / "points").glob("*.json")):
        (row,) = json.loads(path.read_text())["rows"]
        rows[path.name] = {
            k: v for k, v in row.items() if k not in WALL_TIME_COLUMNS and not k.startswith("ovh_")
        }
    return rows


def test_reproduce_on_ray_equals_the_local_run_point_for_point(
    tmp_path: Path, tiny_quick: spec.Scale
) -> None:
    common = ["reproduce", "--quick", "--only", "ablation,overhead", "--no-progress"]
    assert main([*common, "--workers", "2", "--ray", "local", "--out", str(tmp_path / "r")]) == 0
    assert not ray.is_initialized()  # the instance it started is shut down
    assert main([*common, "--workers", "1", "--out", str(tmp_path / "l")]) == 0
    remote, local = _points(tmp_path / "r"), _points(tmp_path / "l")
    assert len(remote) == len(spec.ABLATION) + 4  # same cache keys: the same points
    assert remote.keys() == local.keys()
    for name, row in remote.items():
        assert row == local[name], name
    assert any(r["backend"].endswith("run_overhead") for r in remote.values())
    report = (tmp_path / "r" / "report.md").read_text()
    assert "--ray local" in report and "306.26" in report


def test_ray_auto_without_a_cluster_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no cluster's address file to find there
    args = ["reproduce", "--quick", "--only", "overhead", "--ray", "auto", "--no-progress"]
    assert main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "augserve: error: --ray auto: no Ray cluster there" in err
