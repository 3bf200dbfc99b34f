"""Waiting for a server a test launched in a child process to answer /health."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx


def wait_healthy(proc: subprocess.Popen[bytes] | subprocess.Popen[str], url: str, log: Path,
                 timeout: float = 600.0) -> None:  # fmt: skip
    """Until `url`/health answers 200; fails with the log's tail if the process exits
    or `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"the server exited:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"no /health:\n{log.read_text()[-4000:]}"
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1)
