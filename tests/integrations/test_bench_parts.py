"""A protocol run in parts (benchmarks/vs_vllm/bench_parts.py): parts of disjoint
repeats of one config merge into the result a whole run writes; parts that do not
make one run are refused, naming why."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("httpx")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "vs_vllm"))

import bench_tools_protocol as btp  # noqa: E402
from bench_parts import merge_parts, parse_repeats, part_file  # noqa: E402

from augserve.bench import protocol  # noqa: E402
from tests.integrations.test_bench_tools_protocol import _args, _raw, synthetic_rows  # noqa: E402


def _setup(tmp_path: Path) -> tuple[str, list[Any], dict[str, Any]]:
    raw = _raw()
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(raw))
    cfg = protocol.ComparisonConfig.from_dict(raw)
    rows = synthetic_rows(cfg, _args(raw))
    whole = btp.build_result(cfg, str(path), "whole", rows, "abc")
    return str(path), rows, whole


def _part(cfg: str, rows: list[Any], reps: list[int], commit: str) -> dict[str, Any]:
    mine = [r for r in rows if r["repeat"] in reps]
    return part_file(cfg, reps, mine, commit=commit, wall_s=100.0 * len(reps))


def test_parts_merge_into_the_whole_runs_result(tmp_path: Path) -> None:
    cfg, rows, whole = _setup(tmp_path)
    parts = [_part(cfg, rows, [2], "c2"), _part(cfg, rows, [0, 1], "c1")]  # any order
    merged = merge_parts(cfg, parts, "merge")
    assert merged["cells"] == whole["cells"]
    assert merged["capacity"] == whole["capacity"]
    assert merged["capacity_ratio"] == whole["capacity_ratio"]
    assert merged["commit"] == "c1+c2" and merged["wall_s"] == 300.0
    assert [p["repeats_run"] for p in merged["parts"]] == [[2], [0, 1]]
    protocol.check_result(merged)


def test_parts_that_are_not_one_run_are_refused(tmp_path: Path) -> None:
    cfg, rows, _ = _setup(tmp_path)
    p0, p1, p2 = (_part(cfg, rows, [r], "c") for r in range(3))
    with pytest.raises(ValueError, match=r"repeats run \[0, 1\]"):
        merge_parts(cfg, [p0, p1], "m")  # one missing
    with pytest.raises(ValueError, match=r"repeats run \[0, 1, 1, 2\]"):
        merge_parts(cfg, [p0, p1, p1, p2], "m")  # one twice
    other = tmp_path / "other.json"
    other.write_text(json.dumps(_raw(rates=[1.0, 3.0])))
    with pytest.raises(ValueError, match="parts\\[1\\]: run from another config"):
        merge_parts(cfg, [p0, part_file(str(other), [1], p1["rows"], commit="c"), p2], "m")
    lying = {**p1, "rows": p0["rows"]}
    with pytest.raises(ValueError, match="parts\\[1\\]: rows of repeats it says"):
        merge_parts(cfg, [p0, lying, p2], "m")
    with pytest.raises(ValueError, match="not a part file"):
        merge_parts(cfg, [{"rows": []}], "m")
    avx512 = {"model": "AMD EPYC", "flags": {"avx2": True, "avx512f": True}}
    avx2 = {"model": "AMD EPYC", "flags": {"avx2": True, "avx512f": False}}
    same = [{**p, "cpu": avx512} for p in (p0, p1, p2)]
    assert merge_parts(cfg, same, "m")["repeats"] == 3
    with pytest.raises(ValueError, match="parts\\[2\\]: ran on another CPU.*avx512f.: false"):
        merge_parts(cfg, [*same[:2], {**p2, "cpu": avx2}], "m")


def test_repeats_are_parsed_and_checked() -> None:
    assert parse_repeats("0", 3) == (0,)
    assert parse_repeats("2,0", 3) == (2, 0)
    for bad in ("", "a", "3", "1,1", "-1"):
        with pytest.raises(ValueError, match="--repeats"):
            parse_repeats(bad, 3)


def test_a_split_fixed_in_the_config_is_the_only_one_accepted(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="split"):
        protocol.ComparisonConfig.from_dict(_raw(split=[[0], [1]]))  # repeat 2 in no part
    with pytest.raises(ValueError, match="split"):
        protocol.ComparisonConfig.from_dict(_raw(split=[[0, 1], [1, 2]]))
    raw = _raw(split=[[0], [1], [2]])
    path = tmp_path / "split.json"
    path.write_text(json.dumps(raw))
    cfg = protocol.ComparisonConfig.from_dict(raw)
    assert cfg.split == ((0,), (1,), (2,))
    assert parse_repeats("1", 3, cfg.split) == (1,)
    with pytest.raises(ValueError, match="splits the run"):
        parse_repeats("0,1", 3, cfg.split)
    rows = synthetic_rows(cfg, _args(raw))
    p01, p2 = _part(str(path), rows, [0, 1], "c"), _part(str(path), rows, [2], "c")
    with pytest.raises(ValueError, match="not the config's split"):
        merge_parts(str(path), [p01, p2], "m")
    parts = [_part(str(path), rows, [r], "c") for r in range(3)]
    assert merge_parts(str(path), parts, "m")["repeats"] == 3
