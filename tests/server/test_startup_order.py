"""`augserve serve` checks what needs no model before it loads one: the tools file (its
YAML, its keys, its Python tools' imports, its MCP commands), the chat template file
and the engine's flags are one line and exit status 2 at once, with a model path that
is never touched. A full or read-only cache disk is one line too."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from augserve.cli import main

HERE = Path(__file__).resolve().parent
BOGUS = "/nonexistent/never-touched-model"


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Any attempt to find, fetch or build a model is recorded (and fails)."""
    touched: list[str] = []

    def refuse(what: str) -> Any:
        def f(*args: Any, **kwargs: Any) -> Any:
            touched.append(what)
            raise AssertionError(f"{what} was called")

        return f

    import augserve.engine.builder as builder
    import augserve.engine.resolve as resolve
    import augserve.server.default_model as default_model

    monkeypatch.setattr(builder, "build_engine", refuse("build_engine"))
    monkeypatch.setattr(resolve, "resolve_model", refuse("resolve_model"))
    monkeypatch.setattr(default_model, "default_model", refuse("default_model"))
    return touched


def serve(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    code = main(["serve", "--port", "0", "--model", BOGUS, *flags])
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tools: [{name: a, python: 'x:y'\n", "not valid YAML"),
        ("toolz: []\n", "unknown keys ['toolz']"),
        ("tools: [{name: a, python: 'no_such_mod:f'}]\n", "cannot import 'no_such_mod'"),
        ("tools: [{name: a, python: 'os:system'}]\n", "allow_unsafe"),
        ("mcp_servers: [{name: m, command: no-such-prog}]\n", "is not an executable program"),
        ("mcp_servers: [{name: m, command: python, cwd: /nonexistent/dir}]\n", "is not a folder"),
    ],
)  # fmt: skip
def test_a_bad_tools_file_fails_before_any_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_model: list[str], text: str, message: str
) -> None:
    tools = tmp_path / "tools.yaml"
    tools.write_text(text)
    code, err = serve(capsys, "--tools", str(tools))
    assert code == 2 and no_model == []
    assert err.startswith("augserve: error: ") and message in err and "\n" not in err, err


def test_bad_flags_fail_before_any_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_model: list[str]
) -> None:
    code, err = serve(capsys, "--chat-template", str(tmp_path / "missing.jinja"))
    assert code == 2 and "--chat-template" in err and "\n" not in err, err
    code, err = serve(capsys, "--profile", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json" in err and "\n" not in err, err
    code, err = serve(capsys, "--shutdown-grace", "-1")
    assert code == 2 and "shutdown_grace" in err, err
    assert no_model == []


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"),
        OSError(errno.EROFS, os.strerror(errno.EROFS), "/cache/augserve/default-model"),
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
    ],
    ids=["safetensors-full", "read-only", "full"],
)
def test_a_full_or_read_only_cache_disk_is_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    exc: Exception,
) -> None:
    import augserve.server.default_model as default_model

    def build() -> Any:
        raise exc

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(default_model, "default_model", build)
    code = main(["serve", "--port", "0"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "Traceback" not in err, err
    assert err.startswith("augserve: error: ") and str(tmp_path / "augserve") in err, err
    assert ("No space left" in err) or ("Read-only" in err), err


def test_the_cli_process_exits_2_at_once_on_a_bad_tools_file(tmp_path: Path) -> None:
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - {name: get_weather, pyhton: 'my_tools:get_weather'}\n")
    cmd = [sys.executable, "-m", "augserve", "serve", "--model", BOGUS, "--tools", str(tools)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "exactly one of 'python' or 'http'" in line and "tools.yaml" in line, line
