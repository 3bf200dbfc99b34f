"""`benchmarks/vs_vllm/parts_status.py`: which runs in parts are read, ended or under
way, per machine kind, and what this machine runs next."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "vs_vllm"))

import parts_status as ps  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
AVX2 = {"model": "EPYC", "cores": 2, "flags": {"avx2": True, "avx512f": False}}
AVX512 = {"model": "EPYC", "cores": 2, "flags": {"avx2": True, "avx512f": True}}


def _write(path: Path, blob: dict[str, Any]) -> None:
    path.write_text(json.dumps(blob))


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    configs, data = tmp_path / "benchmarks" / "configs", tmp_path / "docs" / "data"
    configs.mkdir(parents=True)
    data.mkdir(parents=True)
    split = {"split": [[0], [1], [2]], "comment": "NOT RUN YET"}
    _write(configs / "a.json", split)  # two sets under way
    _write(configs / "b.json", split)  # read
    _write(configs / "c.json", {**split, "comment": "A diagnosis, not the protocol"})
    _write(configs / "d.json", split)  # whole on one kind, not read yet
    _write(configs / "whole.json", {"rates": [1.0]})  # no split: not a run in parts
    part = {"repeats_run": [0], "commit": "aaa", "cpu": AVX2}
    for k in (0,):
        _write(data / f"a-part-{k}.json", {**part, "config": "benchmarks/configs/a.json"})
    for k in (0, 1):
        blob = {**part, "repeats_run": [k], "commit": "bbb", "cpu": AVX512}
        _write(data / f"a-avx512-part-{k}.json", {**blob, "config": "benchmarks/configs/a.json"})
    _write(data / "b.json", {"config": "benchmarks/configs/b.json", "parts": [{}, {}, {}]})
    for k in (0, 1, 2):
        blob = {**part, "repeats_run": [k], "config": "benchmarks/configs/d.json"}
        _write(data / f"d-part-{k}.json", blob)
    (data / "notes.log.json").write_text("not json")
    return configs, data


def test_each_run_is_read_ended_or_has_its_sets_per_machine_kind(tmp_path: Path) -> None:
    runs = ps.load_runs(*_tree(tmp_path))
    assert sorted(runs) == [f"benchmarks/configs/{n}.json" for n in "abcd"]
    a = runs["benchmarks/configs/a.json"]
    assert a.read is None and a.ended is None
    assert {ps.kind_label(a.cpus[k]): sorted(v) for k, v in a.sets.items()} == {
        "EPYC (AVX2-only, 2 cores)": [0],
        "EPYC (AVX-512, 2 cores)": [0, 1],
    }
    assert a.missing(ps.kind_key(AVX2)) == [1, 2] and a.missing(ps.kind_key(AVX512)) == [2]
    assert runs["benchmarks/configs/b.json"].read == "docs/data/b.json"
    assert "diagnosis" in (runs["benchmarks/configs/c.json"].ended or "")


def test_what_runs_next_here_is_the_missing_parts_of_this_kinds_set_from_its_commit(
    tmp_path: Path,
) -> None:
    runs = ps.load_runs(*_tree(tmp_path))
    a = runs["benchmarks/configs/a.json"]
    on_avx512 = ps.describe(a, ps.kind_key(AVX512))
    assert on_avx512[-1].endswith("benchmarks/configs/a.json bbb OUTDIR 2")
    assert any("AVX-512" in line and "<- this machine" in line for line in on_avx512)
    assert ps.describe(a, ps.kind_key(AVX2))[-1].endswith("a.json aaa OUTDIR 1 2")
    # a kind with no set yet starts at part 0 from the commit that added the config
    other = ps.kind_key({**AVX2, "model": "Xeon"})
    assert ps.describe(a, other)[-1].split("OUTDIR ")[1] == "0 1 2"
    assert ps.describe(runs["benchmarks/configs/b.json"], other) == [
        "benchmarks/configs/b.json: read (docs/data/b.json)"
    ]
    whole = ps.describe(runs["benchmarks/configs/d.json"], other)
    assert "whole on EPYC (AVX2-only, 2 cores): read it once now" in whole[-1]


def test_the_committed_parts_are_repeats_their_configs_split_names() -> None:
    runs = ps.load_runs(ROOT / "benchmarks" / "configs", ROOT / "docs" / "data")
    assert "benchmarks/configs/vs-vllm-tools-r5.json" in runs
    for run in runs.values():
        for done in run.sets.values():
            assert set(done) <= set(run.repeats), run.config
        if run.read:
            assert Path(ROOT / run.read).exists()
