"""`--help` lists the choices and the defaults, and explains the bench table."""

from __future__ import annotations

import pytest

from augserve.bench.report import TABLE, format_table
from augserve.cli import main
from augserve.profiles import list_profiles
from augserve.sched.policies import POLICIES


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main([*argv, "--help"]) == 0
    return " ".join(capsys.readouterr().out.split())  # unwrap argparse's line breaks


def test_bench_help_lists_choices_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, "bench")
    for policy in POLICIES:
        assert policy in text
    for profile in list_profiles():
        assert profile in text
    for expected in (
        "(default: vllm,infercept,ssjf,mars,augserve)",  # policies
        "(default: opt-13b-h800)",  # profile
        "(default: 2,3,4,5,6)",  # rates
        "(default: 450)",  # window
        "(default: runs/bench)",  # output folder
        "(default: oracle)",  # predictor
        "oracle, noisy:P",
        "poisson or gamma:CV",
        "merged_exp_uniform.json",  # the default trace
        "points/",  # the cache, and that a rerun reuses it
        "--fresh",
        "130",  # what Ctrl-C does
    ):
        assert expected in text, expected


def test_bench_help_and_table_footnote_explain_every_column(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = _help(capsys, "bench")
    for _, header, _, meaning in TABLE:
        assert f"{header} {' '.join(meaning.split())}" in text
    for header in ("fin", "NL", "longQ", "goodput", "SLO", "TTFT"):
        assert header in [h for _, h, _, _ in TABLE]
    table = format_table([{"policy": "vllm", "rate": 2.0, "goodput": 1.25, "ttft_mean": None}])
    header_line, row = table.splitlines()
    assert header_line.split() == [h for _, h, _, _ in TABLE]
    assert row.split()[:4] == ["vllm", "2", "1.250", "-"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["workload"], ["stats", "gen"]),
        (["workload", "gen"], ["infercept-like", "toolbench-like", "mixed:FRACTION", "--num"]),
        (["workload", "stats"], ["(default: 0"]),
        (["predictor"], ["train", "eval"]),
        (["predictor", "train"], ["(default: 0.2)", "(default: 128)", "--no-embed"]),
        (["predictor", "eval"], ["--model", "predictor train"]),
    ],
)
def test_other_commands_help(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: list[str]
) -> None:
    text = _help(capsys, *argv)
    for word in expected:
        assert word in text, word
