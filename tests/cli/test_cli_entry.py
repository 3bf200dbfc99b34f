"""Entry points: the `augserve` script, `python -m augserve`, `--version`."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import augserve
from augserve.cli import main

SCRIPT = Path(sys.executable).with_name("augserve")


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_version_flag_of_the_installed_script() -> None:
    proc = _run(str(SCRIPT), "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"augserve {augserve.__version__}"
    # the package's version is the one it was installed as
    assert augserve.__version__ == version("augserve")


def test_python_dash_m_lists_the_commands() -> None:
    proc = _run(sys.executable, "-m", "augserve", "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: augserve")
    for command in ("bench", "workload", "predictor", "--version"):
        assert command in proc.stdout
    proc = _run(sys.executable, "-m", "augserve", "--version")
    assert proc.stdout.strip() == f"augserve {augserve.__version__}"


def test_no_command_is_a_one_line_usage_error(capsys) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("augserve: error:")
    assert "augserve --help" in err
