from __future__ import annotations

from pathlib import Path

import pytest

from augserve.cli import main
from augserve.workload.jsonl import read_jsonl


def test_gen_then_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w.jsonl"
    assert (
        main(
            [
                "workload",
                "gen",
                "--workload",
                "toolbench-like",
                "--num",
                "25",
                "--seed",
                "3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert len(read_jsonl(out)) == 25
    assert main(["workload", "stats", str(out)]) == 0
    text = capsys.readouterr().out
    assert "requests: 25" in text and "kind toolbench" in text


def test_stats_real_trace(merged_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workload", "stats", str(merged_path)]) == 0
    text = capsys.readouterr().out
    assert "requests: 397" in text and "calls_per_request_max: 16" in text


def test_bad_file_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{")
    assert main(["workload", "stats", str(bad)]) == 2
    assert "bad.jsonl" in capsys.readouterr().err
