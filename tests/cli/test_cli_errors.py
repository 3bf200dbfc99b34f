"""Bad input gets one line, `augserve: error: ...` naming the flag and the value,
exit status 2, before any work starts: never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from augserve.cli import main

BENCH = ["bench", "--workload", "infercept-like", "--policies", "vllm", "--rates", "1"]
BENCH += ["--window", "5", "--workers", "1", "--no-progress"]


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    rc = main(argv)
    captured = capsys.readouterr()
    err = captured.err
    assert rc == 2, (argv, captured.out, err)
    assert err.startswith("augserve: error: ") and err.endswith("\n"), err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err and captured.out == ""
    assert "BenchPoint" not in err and "SchedulerConfig" not in err  # flags, not classes
    return err


BENCH_FLAG_CASES = [
    # (extra args, words the message must contain)
    (["--rates", "inf"], ["--rates", "'inf'"]),
    (["--rates", "nan"], ["--rates", "'nan'"]),
    (["--rates", "0"], ["--rates", "'0'"]),
    (["--rates", "-1"], ["--rates", "'-1'"]),
    (["--rates", "2,x"], ["--rates", "'x'"]),
    (["--rates", ","], ["--rates", "at least one"]),
    (["--window", "0"], ["--window", "'0'"]),
    (["--window", "inf"], ["--window", "'inf'"]),
    (["--window", "-3"], ["--window", "'-3'"]),
    (["--drain", "-1"], ["--drain", "'-1'"]),
    (["--drain", "nan"], ["--drain", "'nan'"]),
    (["--workers", "0"], ["--workers", "'0'"]),
    (["--seeds", "0"], ["--seeds", "'0'"]),
    (["--block-size", "0"], ["--block-size", "'0'"]),
    (["--max-batch-tokens", "0"], ["--max-batch-tokens", "'0'"]),
    (["--beta", "-1"], ["--beta", "'-1'"]),
    (["--threads", "0"], ["--threads", "'0'"]),
    (["--time-scale", "inf"], ["--time-scale", "'inf'"]),
    (["--policies", "vllm,fifo"], ["--policies", "'fifo'", "augserve"]),
    (["--profile", "a100-nope"], ["--profile", "a100-nope", "opt-13b-h800"]),
    (["--predictor", "perfect"], ["--predictor", "'perfect'", "noisy:P"]),
    (["--predictor", "noisy:2"], ["--predictor", "noisy:2"]),
    (["--predictor", "learned:/no/such/dir"], ["--predictor", "/no/such/dir"]),
    (["--arrival", "gamma:0"], ["--arrival", "gamma:0"]),
    (["--arrival", "uniform"], ["--arrival", "uniform"]),
    (["--set", "nope=1"], ["--set", "nope"]),
    (["--set", "beta_high"], ["--set", "beta_high"]),
    (["--set", "scan_on=maybe"], ["--set", "maybe"]),
    (["--set", "beta_high=0.5"], ["--set", "beta_high", "0.5"]),
    (["--block-size", "100000"], ["--block-size 100000", "opt-13b-h800"]),
    (["--backend", "gpu"], ["--backend", "gpu", "sim"]),
    (["--workload", "nope"], ["--workload", "nope", "infercept-like"]),
]


@pytest.mark.parametrize(("extra", "words"), BENCH_FLAG_CASES, ids=lambda x: " ".join(x))
def test_bench_bad_flag_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: list[str]
) -> None:
    out = tmp_path / "out"
    err = _one_line_error(capsys, [*BENCH, "--out", str(out), *extra])
    for word in words:
        assert word in err, (word, err)
    # rejected before any work: nothing written
    assert not (out / "results.json").exists() and not (out / "points").exists()


def _trace_cases(tmp: Path) -> dict[str, tuple[Path, str]]:
    bad = tmp / "bad.jsonl"
    bad.write_text('{"request_id": "a"}\n')
    return {
        "directory": (tmp, "is a directory"),
        "missing": (tmp / "nope.json", "no such file"),
        "malformed": (bad, "prompt_len"),
    }


@pytest.mark.parametrize("case", ["directory", "missing", "malformed"])
def test_bench_bad_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    path, words = _trace_cases(tmp_path)[case]
    argv = ["bench", "--trace", str(path), "--rates", "1", "--window", "5", "--workers", "1"]
    err = _one_line_error(capsys, [*argv, "--out", str(tmp_path / "o")])
    assert "--trace" in err and str(path) in err and words in err


def _out_cases(tmp: Path) -> dict[str, tuple[Path, str]]:
    afile = tmp / "afile"
    afile.write_text("x")
    return {
        "existing file": (afile, "not a directory"),
        "under a file": (afile / "sub", "cannot create"),
        "read-only dir": (Path("/proc"), "is not writable"),
        "cannot create": (Path("/sys/augserve-test-out"), "cannot create"),
    }


@pytest.mark.parametrize(
    "case", ["existing file", "under a file", "read-only dir", "cannot create"]
)
def test_bench_unwritable_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    path, words = _out_cases(tmp_path)[case]
    if not path.parent.exists():
        pytest.skip(f"{path.parent} does not exist on this system")
    err = _one_line_error(capsys, [*BENCH, "--out", str(path)])
    assert "--out" in err and str(path) in err and words in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in read-only folders")
def test_bench_out_in_a_read_only_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        for path in (ro, ro / "sub"):
            err = _one_line_error(capsys, [*BENCH, "--out", str(path)])
            assert "--out" in err and str(path) in err
    finally:
        ro.chmod(0o700)


def test_bench_engine_needs_a_model_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AUGSERVE_ENGINE_MODEL", raising=False)
    base = [*BENCH, "--backend", "engine", "--out", str(tmp_path)]
    assert "--model" in _one_line_error(capsys, base)
    err = _one_line_error(capsys, [*base, "--model", str(tmp_path / "nope")])
    assert "--model" in err and "nope" in err
    assert "AUGSERVE_ENGINE_MODEL" not in os.environ


def test_workload_command_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traces = _trace_cases(tmp_path)
    for case, (path, words) in traces.items():
        err = _one_line_error(capsys, ["workload", "stats", str(path)])
        assert "TRACE" in err and str(path) in err and words in err, (case, err)
    err = _one_line_error(capsys, ["workload", "stats", "nope-like", "--num", "3"])
    assert "nope-like" in err
    gen = ["workload", "gen", "--workload", "toolbench-like", "--num", "3"]
    assert "'0'" in _one_line_error(capsys, [*gen[:-1], "0", "--out", str(tmp_path / "w.jsonl")])
    err = _one_line_error(capsys, [*gen, "--out", str(tmp_path)])
    assert "--out" in err and "is a directory" in err
    err = _one_line_error(capsys, [*gen, "--out", str(tmp_path / "no" / "w.jsonl")])
    assert "--out" in err and "does not exist" in err
    err = _one_line_error(
        capsys, ["workload", "gen", "--workload", "x", "--num", "3", "--out", str(tmp_path / "w")]
    )
    assert "--workload" in err and "'x'" in err


def test_predictor_command_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"request_id": "a", "prompt_len": 3, "segments": [{"output_len": 2}]}\n')
    afile = tmp_path / "afile"
    afile.write_text("x")
    train = ["predictor", "train", "--no-embed"]
    err = _one_line_error(capsys, [*train, "--trace", str(tmp_path), "--out", str(tmp_path / "m")])
    assert "--trace" in err and "is a directory" in err
    err = _one_line_error(
        capsys, [*train, "--trace", str(trace), "--out", str(tmp_path), "--test-frac", "1"]
    )
    assert "--test-frac" in err and "'1'" in err
    err = _one_line_error(capsys, [*train, "--trace", str(trace), "--out", str(afile)])
    assert "--out" in err and "not a directory" in err
    evaluate = ["predictor", "eval", "--trace", str(trace)]
    err = _one_line_error(capsys, [*evaluate, "--model", str(tmp_path / "nope")])
    assert "--model" in err and "nope" in err
    err = _one_line_error(capsys, [*evaluate, "--model", str(tmp_path)])
    assert "--model" in err and "manifest.json" in err


@pytest.mark.parametrize(
    "argv",
    [["--rates", "inf"], ["--trace", "/"]],
    ids=["rates-inf", "trace-dir"],
)
def test_the_installed_script_prints_one_line(tmp_path: Path, argv: list[str]) -> None:
    script = Path(sys.executable).with_name("augserve")
    proc = subprocess.run(
        [str(script), "bench", *argv, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("augserve: error: argument ") and proc.stderr.count("\n") == 1
    assert argv[0] in proc.stderr and argv[1] in proc.stderr


def test_compare_reports_a_bad_results_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from augserve.bench.compare import main as compare_main

    bad = tmp_path / "bad.json"
    bad.write_text('{"meta": {}}')
    for path, words in ((tmp_path / "nope.json", "No such file"), (tmp_path, "Is a directory")):
        assert compare_main([str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(path) in err and words in err
    assert compare_main([str(bad)]) == 2
    assert "not a results file" in capsys.readouterr().err
