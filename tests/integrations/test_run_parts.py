"""benchmarks/vs_vllm/run_parts.sh: the parts of a split run, one after another, each from
a detached checkout of part 0's commit, never from the working tree that moved on."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "vs_vllm" / "run_parts.sh"
# stands in for the benchmark: records where it ran, from which code, with which arguments
FAKE = """#!/usr/bin/env bash
if [ -n "${EDIT:-}" ]; then  # rewritten in place (the same file, as some editors save)
  text="$(cat "$EDIT")"; printf '# a line added while the run goes on\n%s\n' "$text" > "$EDIT"
fi
echo "cwd=$PWD pythonpath=$PYTHONPATH code=$(cat code.txt) venv=$(readlink .venv) args=$*"
"""

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    done = subprocess.run(["git", "-C", str(repo), *args], env=env, check=True,
                          capture_output=True, text=True)  # fmt: skip
    return done.stdout.strip()


def _repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose part-0 commit says `code.txt = v1`, then moved on to v2."""
    repo = tmp_path / "repo"
    (repo / "benchmarks" / "vs_vllm").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "benchmarks" / "vs_vllm" / "run_parts.sh")
    (repo / "code.txt").write_text("v1")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "part 0's code")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "code.txt").write_text("v2")
    _git(repo, "commit", "-qam", "work after part 0")
    return repo, first


def _run(
    repo: Path, tmp_path: Path, *args: str, edit: bool = False
) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "python"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake), "QUIET_LOAD": "1000", "MODEL": "m",
           "CHECKOUT": str(tmp_path / "checkout")}  # fmt: skip
    script = repo / "benchmarks" / "vs_vllm" / "run_parts.sh"
    if edit:  # each part edits the running script, as a developer may during hours of parts
        env["EDIT"] = str(script)
    return subprocess.run(["bash", str(script), *args], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_each_part_runs_in_order_from_part_0s_commit(tmp_path: Path) -> None:
    repo, first = _repo(tmp_path)
    done = _run(repo, tmp_path, "cfg.json", first, str(tmp_path / "out"), "3", "4")
    assert done.returncode == 0, done.stderr
    assert [line.split()[1:3] for line in done.stdout.splitlines()] == [
        ["part", "3"], ["part", "3"], ["part", "4"], ["part", "4"]]  # fmt: skip
    checkout = tmp_path / "checkout"
    for k in (3, 4):
        log = (tmp_path / "out" / f"part-{k}.log").read_text()
        assert f"cwd={checkout} pythonpath={checkout} code=v1 " in log  # not the tree's v2
        # our server starts as .venv/bin/augserve in the checkout: the tree's environment
        assert f" venv={repo / '.venv'} " in log
        out = f"--out {tmp_path}/out/part-{k}.json"
        assert f"--config cfg.json --model m --repeats {k} {out}" in log
    assert (repo / "code.txt").read_text() == "v2"  # the working tree is left as it was


def test_editing_the_script_during_a_run_changes_nothing_in_it(tmp_path: Path) -> None:
    repo, first = _repo(tmp_path)
    done = _run(repo, tmp_path, "cfg.json", first, str(tmp_path / "out"), "0", "1", edit=True)
    assert done.returncode == 0, done.stderr
    assert [line.split()[2] for line in done.stdout.splitlines()] == ["0", "0", "1", "1"]
    script = (repo / "benchmarks" / "vs_vllm" / "run_parts.sh").read_text()
    assert script.count("a line added while the run goes on") == 2  # it was edited twice


def test_a_checkout_at_another_commit_is_refused(tmp_path: Path) -> None:
    repo, first = _repo(tmp_path)
    _git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "checkout"), "HEAD")
    done = _run(repo, tmp_path, "cfg.json", first, str(tmp_path / "out"), "0")
    assert done.returncode == 1 and "is not at" in done.stderr
    assert not (tmp_path / "out" / "part-0.log").exists()


def test_without_its_arguments_it_prints_its_usage() -> None:
    done = subprocess.run(["bash", str(SCRIPT), "cfg.json"], capture_output=True, text=True,
                          timeout=30)  # fmt: skip
    assert done.returncode == 2 and "run_parts.sh CONFIG COMMIT OUTDIR K" in done.stdout
