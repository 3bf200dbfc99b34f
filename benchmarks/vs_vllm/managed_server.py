"""A benchmarked server as a process: `ManagedServer` starts it in its own process
group, waits (bounded) for `/health`, and stops the whole group by its id (SIGTERM, then
SIGKILL) with its port freed; `free_port` hands out ports (`BENCH_PORTS` for a machine
whose users each have a range). No vLLM import: it runs in either virtual environment."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx


def free_port() -> int:
    """A free local port: the first free one of `BENCH_PORTS` ("LOW-HIGH", for a
    machine whose users each have a range), else any the kernel gives."""
    span = os.environ.get("BENCH_PORTS")
    if span:
        low, high = (int(x) for x in span.split("-"))
        for port in range(low, high + 1):
            if port_free(port) and port not in _TAKEN:
                _TAKEN.add(port)
                return port
        raise RuntimeError(f"BENCH_PORTS {span}: no free port")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_TAKEN: set[int] = set()  # handed out by free_port (a server may not have bound it yet)


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _group_gone(proc: subprocess.Popen[bytes]) -> bool:
    """Whether no process is left in the group `proc` leads (reaping the leader)."""
    proc.poll()
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return True
    return False


class ManagedServer:
    """A server started in its own process group, healthy within `start_timeout`, and
    stopped by its process-group id (SIGTERM, then SIGKILL) with its port freed."""

    def __init__(self, argv: list[str], port: int, env: dict[str, str], log: Path) -> None:
        self.argv, self.port, self.env, self.log_path = argv, port, env, log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, start_timeout: float = 900.0) -> None:
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}); see {self.log_path}")
            try:
                if httpx.get(self.base_url + "/health", timeout=5.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(2.0)
        self.stop()
        raise TimeoutError(f"server not healthy after {start_timeout:.0f} s; see {self.log_path}")

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM to the server's process group, SIGKILL what is left after `grace`."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            if _group_gone(proc):
                break
            try:
                os.killpg(proc.pid, sig)  # the group this server leads (start_new_session)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while not _group_gone(proc) and time.monotonic() < deadline:
                time.sleep(0.25)
        deadline = time.monotonic() + 30.0
        while not port_free(self.port) and time.monotonic() < deadline:
            time.sleep(0.5)

    def __enter__(self) -> ManagedServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
