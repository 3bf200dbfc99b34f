"""The README's commands as written: its test command is the one `.ci/run` runs, and
the server quick start's shell blocks, parsed out of README.md, run in order in a fresh
folder and print what the README says they print (the default model, SmolLM2; skipped
when it cannot be had). A README that drifts from the code fails here."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUICK_START = "## Serve a model with server-side tools"
EXPECT = "# -> "  # a comment line in a block: the output must contain this text
BLOCK = re.compile(r"```bash\n(.*?)```", re.S)


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start : end if end >= 0 else len(text)]


def bash_blocks(title: str) -> list[str]:
    return BLOCK.findall(section(title))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_free_ports(block: str) -> str:
    """The block with each `--port N` it names (and every other N in it) on a free port."""
    for port in sorted(set(re.findall(r"--port (\d+)", block))):
        block = re.sub(rf"\b{port}\b", str(free_port()), block)
    return block


def expected_outputs(block: str) -> list[str]:
    return [ln.strip()[len(EXPECT) :] for ln in block.splitlines() if ln.strip().startswith(EXPECT)]


def test_the_readme_test_command_is_the_ci_one() -> None:
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    blocks = [b.strip() for b in bash_blocks("## Set up")]
    assert ci in blocks, (ci, blocks)
    install = re.search(r"pip install -e '\.\[([a-z,]+)\]'", ci)
    assert install is not None  # the quick start's extras are a subset of CI's plus server
    setup = "\n".join(bash_blocks(QUICK_START)[:1])
    assert "pip install -e '.[cpu,engine,server]'" in setup, setup


def test_the_quick_start_blocks_name_distinct_ports() -> None:
    ports = [p for b in bash_blocks(QUICK_START) for p in re.findall(r"--port (\d+)", b)]
    assert len(ports) >= 2 and len(set(ports)) == len(ports), ports
    for block in bash_blocks(QUICK_START)[1:]:
        (port,) = set(re.findall(r"--port (\d+)", block))
        assert f"localhost:{port}/health" in block, block  # waits for its own server
        assert expected_outputs(block), block  # says what it prints


def start_block(block: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """One block in its own bash (`kill %1` stops its server, `wait` lets it drain)."""
    script = "set -e\ntrap '[ $? -eq 0 ] || kill $(jobs -p) 2>/dev/null' EXIT\n" + block + "wait\n"
    return subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def kill_group(proc: subprocess.Popen[str]) -> None:
    """Whatever happened, no server of a block outlives the test."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def finish(proc: subprocess.Popen[str]) -> str:
    out, _ = proc.communicate(timeout=900)  # a hang guard: the block waits on /health
    assert proc.returncode == 0, out
    return out


def assert_printed(want: str, out: str) -> None:
    """`want` in `out`, where "..." in `want` stands for anything."""
    at = 0
    for piece in (p.strip() for p in want.split("...") if p.strip()):
        at = out.find(piece, at)
        assert at >= 0, (piece, out)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the quick start waits with curl")
def test_the_server_quick_start_runs_as_written(smollm2_gguf: Path, tmp_path: Path) -> None:
    pytest.importorskip("openai")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),  # this checkout's augserve, as an editable install gives
        "AUGSERVE_COMPILE": "0",  # eager: no one-off compile in a test
    }
    blocks = bash_blocks(QUICK_START)[1:]  # the first installs; the tests run installed
    assert len(blocks) == 2, blocks
    # Distinct ports and folders: both servers start side by side, as in two shells.
    folders = [tmp_path / str(i) for i in range(len(blocks))]
    procs = []
    for block, folder in zip(blocks, folders, strict=True):
        folder.mkdir()
        procs.append(start_block(with_free_ports(block), folder, env))
    try:
        for block, proc in zip(blocks, procs, strict=True):
            out = finish(proc)
            for want in expected_outputs(block):
                assert_printed(want, out)
    finally:
        for proc in procs:
            kill_group(proc)
