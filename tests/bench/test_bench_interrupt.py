"""Ctrl-C in `augserve bench`: the first press stops the workers at once, writes
what finished and exits 130; a second press exits at once; no process is left;
a rerun of the same command reuses the finished points."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from augserve.bench import runner
from augserve.bench.cache import PointCache, point_identity, point_key
from augserve.bench.runner import BenchPoint, register_backend
from augserve.cli import main

SCRIPT = Path(sys.executable).with_name("augserve")
# 12 simulator points of about half a second each on two workers
ARGS = ["--workload", "infercept-like", "--policies", "vllm,ssjf,augserve"]
ARGS += ["--rates", "3,4,5,6", "--window", "60", "--workers", "2", "--no-progress"]


def _session_pids(sid: int) -> list[int]:
    """Live (non-zombie) processes of session `sid`: the bench and everything it started."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp session ...
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def _start(out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(SCRIPT), "bench", *ARGS, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a shell job
    )


def _wait_for_points(proc: subprocess.Popen[str], out: Path, n: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = _saved(out)
        if done >= n:
            return done
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"{n} points did not finish in {timeout} s")


def _saved(out: Path) -> int:
    """Point files saved (a save in progress has a hidden temporary name)."""
    folder = out / "points"
    return sum(not p.name.startswith(".") for p in folder.glob("*.json")) if folder.is_dir() else 0


def _ctrl_c(proc: subprocess.Popen[str]) -> None:
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does: the whole foreground group


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_first_ctrl_c_stops_writes_and_exits_130_then_rerun_resumes(tmp_path: Path) -> None:
    out = tmp_path / "b"
    proc = _start(out)
    _wait_for_points(proc, out, 2, timeout=60)
    assert len(_session_pids(proc.pid)) >= 3  # the bench and its two workers
    at_ctrl_c = _saved(out)
    _ctrl_c(proc)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert _session_pids(proc.pid) == []  # no process left behind
    assert "Traceback" not in stderr and "interrupted" in stderr
    # what finished is written: table, JSON, CSV, plot
    finished = _saved(out)
    assert not list((out / "points").glob(".tmp-*"))  # no save left half done
    payload = json.loads((out / "results.json").read_text())
    assert payload["meta"]["complete"] is False
    assert payload["meta"]["points_finished"] == finished and 2 <= finished < 12
    # nothing was started after Ctrl-C: at most the two points then running finished
    assert at_ctrl_c <= finished <= at_ctrl_c + 2
    assert len(json.loads((out / "points.json").read_text())["rows"]) == finished
    assert len((out / "results.csv").read_text().splitlines()) == finished + 1
    assert (out / "bench.png").read_bytes()[:4] == b"\x89PNG"
    assert "goodput" in stdout and "fin" in stdout and "columns:" in stdout
    # the same command again reuses them and computes only the rest
    proc = _start(out)
    _wait_for_points(proc, out, finished + 1, timeout=60)
    _ctrl_c(proc)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert f"reusing {finished} of 12 points" in stderr
    assert json.loads((out / "results.json").read_text())["meta"]["points_finished"] > finished


def test_second_ctrl_c_exits_at_once(tmp_path: Path) -> None:
    out = tmp_path / "b"
    proc = _start(out)
    _wait_for_points(proc, out, 1, timeout=60)
    at_ctrl_c = _saved(out)
    _ctrl_c(proc)
    time.sleep(0.05)
    _ctrl_c(proc)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    deadline = time.monotonic() + 30  # a wait, not a bound: SIGKILLed workers vanish soon
    while _session_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _session_pids(proc.pid) == []  # the workers were killed, not left running
    assert _saved(out) <= at_ctrl_c + 2  # and stopped


# --- resuming, in process: a backend that counts what it computes ------------------------
CALLS: list[tuple[str, float]] = []
STOP_AFTER: list[int] = []


def _counting_backend(point: BenchPoint) -> list[dict[str, object]]:
    if STOP_AFTER and len(CALLS) >= STOP_AFTER[0]:
        raise KeyboardInterrupt  # as if Ctrl-C came during this point
    CALLS.append((point.policy, point.rate))
    return [
        {
            **point.key(),
            "goodput": point.rate / 2,
            "ttft_mean": 0.5,
            "norm_latency_mean": 0.1,
            "finished_share": 1.0,
        }
    ]


def test_rerun_computes_only_the_points_not_finished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(runner.BACKENDS, "counting", "")  # undone after the test: unregistered
    register_backend("counting", f"{__name__}:_counting_backend")
    argv = ["bench", "--backend", "counting", "--workload", "infercept-like", "--no-progress"]
    argv += ["--policies", "vllm,augserve", "--rates", "1,2,3", "--workers", "1"]
    argv += ["--out", str(tmp_path)]
    CALLS.clear()
    STOP_AFTER[:] = [4]
    assert main(argv) == 130
    assert len(CALLS) == 4 and len(list((tmp_path / "points").glob("*.json"))) == 4
    captured = capsys.readouterr()
    assert "interrupted: 4 of 6 points" in captured.err
    table_rows = re.findall(r"^ *(vllm|augserve) +\d", captured.out, flags=re.M)
    assert table_rows == ["vllm"] * 3 + ["augserve"]
    CALLS.clear()
    STOP_AFTER.clear()
    assert main(argv) == 0
    assert CALLS == [("augserve", 2.0), ("augserve", 3.0)]  # only the two left
    assert "reusing 4 of 6 points" in capsys.readouterr().err
    rows = json.loads((tmp_path / "results.json").read_text())["rows"]
    assert [(r["policy"], r["rate"], r["goodput"]) for r in rows] == [
        (p, r, r / 2) for p in ("vllm", "augserve") for r in (1.0, 2.0, 3.0)
    ]
    CALLS.clear()
    assert main([*argv, "--fresh"]) == 0 and len(CALLS) == 6
    CALLS.clear()
    assert main([*argv[:-2], "--window", "60", "--out", str(tmp_path)]) == 0
    assert len(CALLS) == 6  # another window is another point


def test_cache_key_and_bad_files(tmp_path: Path) -> None:
    p = BenchPoint("vllm", 2.0, workload="infercept-like", window=30.0)
    cache = PointCache(tmp_path)
    assert cache.get(p) is None
    path = cache.put(p, [{"policy": "vllm", "goodput": float("nan"), "x": 1}])
    got = cache.get(p)
    assert got is not None and got[0]["x"] == 1 and got[0]["goodput"] != got[0]["goodput"]
    assert path.name == f"{point_key(point_identity(p))}.json"
    other = BenchPoint("vllm", 2.0, workload="infercept-like", window=30.0, seed=1)
    assert point_key(point_identity(other)) != point_key(point_identity(p))
    assert cache.get(other) is None
    path.write_text("{not json")  # e.g. a file cut short by a crash: ignored, recomputed
    assert cache.get(p) is None
    path.write_text(json.dumps({"key": point_identity(other), "rows": []}))
    assert cache.get(p) is None  # the stored key must match the point
