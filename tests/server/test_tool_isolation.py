"""Tools run apart from everything else: stuck sync tools hold only their own threads,
isolated tools run in worker processes killed at their timeout, and MCP servers are
supervised (a killed server is reconnected for the next call)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from augserve.engine.tools import ParsedCall
from augserve.server import mcp_tools
from augserve.server.tool_config import ToolsConfig
from augserve.server.tool_registry import ToolRegistry

HERE = Path(__file__).resolve().parent


def py_tool(name: str, fn: str, **extra: object) -> dict:
    return {"name": name, "python": f"augserve_test_tools:{fn}", **extra}


def registry(*tools: dict, **extra: object) -> ToolRegistry:
    return ToolRegistry(ToolsConfig.from_dict({"tools": list(tools), **extra}))


def test_stuck_sync_tools_hold_only_their_own_threads() -> None:
    """8 calls of a tool that never returns time out at once; they use the tool's own 8
    threads, not the loop's default executor, and another sync tool still answers."""
    reg = registry(
        py_tool("hang", "hang", timeout=0.5, max_concurrency=8), py_tool("w", "get_weather")
    )
    default_pool_used = threading.Event()

    async def go() -> tuple[list, object, float]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(_Spy(default_pool_used))
        t0 = time.monotonic()
        stuck = await asyncio.gather(*(reg.run(ParsedCall("hang", {})) for _ in range(8)))
        waited = time.monotonic() - t0
        other = await reg.run(ParsedCall("w", {"city": "Oslo"}))
        again = await reg.run(ParsedCall("hang", {}))  # all 8 threads stuck: queued, times out
        return [*stuck, again], other, waited

    outs, other, waited = asyncio.run(go())
    assert all(o.error == "timeout" for o in outs)
    assert waited < 5.0  # each answered at its 0.5 s timeout, not when its thread ended
    assert other.error is None and "Oslo" in other.text
    assert reg.threads["hang"].num_threads == 8  # bounded by max_concurrency
    assert not default_pool_used.is_set()


class _Spy(ThreadPoolExecutor):
    """A default executor that records being used."""

    def __init__(self, used: threading.Event) -> None:
        super().__init__(1)
        self.used = used

    def submit(self, *args: object, **kwargs: object) -> Future:  # type: ignore[override]
        self.used.set()
        return super().submit(*args, **kwargs)  # type: ignore[arg-type]


def test_isolated_tool_runs_in_a_worker_process_killed_at_its_timeout() -> None:
    reg = registry(
        py_tool("pid", "pid", isolate=True),
        py_tool("hang", "hang", isolate=True, timeout=1.0),
        py_tool("crash", "crash", isolate=True),
        py_tool("boom", "boom", isolate=True),
    )

    async def go() -> dict:
        await reg.start()
        try:
            first = await reg.run(ParsedCall("pid", {}))
            second = await reg.run(ParsedCall("pid", {}))
            hung = await reg.run(ParsedCall("hang", {}))
            crashed = await reg.run(ParsedCall("crash", {}))
            boom = await reg.run(ParsedCall("boom", {"x": "here"}))
            return {"first": first, "second": second, "hung": hung, "crashed": crashed,
                    "boom": boom}  # fmt: skip
        finally:
            await reg.close()

    outs = asyncio.run(go())
    pid = int(outs["first"].text)
    assert pid != os.getpid() and outs["second"].text == str(pid)  # a reused worker
    assert outs["hung"].error == "timeout"
    assert reg.workers["hang"].killed == 1  # killed at its timeout
    assert outs["crashed"].error == "exception" and "exit code 7" in outs["crashed"].text
    assert outs["boom"].error == "exception" and "RuntimeError: boom here" in outs["boom"].text
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # closed with the registry


def test_isolate_needs_a_python_tool() -> None:
    with pytest.raises(ValueError, match="isolate must be true or false"):
        ToolsConfig.from_dict({"tools": [py_tool("a", "add", isolate="yes")]})
    with pytest.raises(ValueError, match="isolate applies to python tools only"):
        ToolsConfig.from_dict(
            {
                "tools": [{"name": "h", "http": {"url": "http://x.io/"}, "isolate": True}],
                "allowed_hosts": ["x.io"],
            }  # fmt: skip
        )


# --- MCP supervision ---------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_http_mcp(port: int, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "mcp_test_server.py"), "--http", str(port)],
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)


def test_killed_mcp_server_is_reconnected_for_the_next_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HTTP MCP server killed and restarted: the call while it is down answers the
    model with an error naming it, the supervisor reconnects, and the next call works."""
    monkeypatch.setattr(mcp_tools, "BACKOFF_MIN", 0.2, raising=False)
    port = _free_port()
    log = tmp_path / "mcp.log"
    proc = _start_http_mcp(port, log)
    url = f"http://127.0.0.1:{port}/mcp"
    reg = ToolRegistry(
        ToolsConfig.from_dict({"mcp_servers": [{"name": "web", "url": url, "timeout": 10}]})
    )

    async def go() -> dict:
        nonlocal proc
        await reg.start()
        server = reg.mcp_servers["web"]
        try:
            before = await reg.run(ParsedCall("add", {"a": 1, "b": 2}))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            down = await reg.run(ParsedCall("add", {"a": 1, "b": 2}))
            state_down = reg.server_states()["web"]
            proc = await asyncio.to_thread(_start_http_mcp, port, log)
            deadline = time.monotonic() + 60
            while server.state != "up":
                assert time.monotonic() < deadline, f"not reconnected: {server.last_error}"
                await asyncio.sleep(0.1)
            after = await reg.run(ParsedCall("add", {"a": 20, "b": 22}))
            return {"before": before, "down": down, "state_down": state_down, "after": after,
                    "connects": server.connects}  # fmt: skip
        finally:
            await reg.close()

    try:
        out = asyncio.run(go())
    finally:
        proc.kill()
        proc.wait(10)
    assert out["before"].error is None and out["before"].text == "3"
    assert out["down"].error == "exception" and "'web'" in out["down"].text
    assert out["state_down"] in ("down", "connecting")
    assert out["after"].error is None and out["after"].text == "42"
    assert out["connects"] == 2
    assert reg.server_states() == {"web": "closed"}


def test_crashed_stdio_mcp_server_is_restarted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stdio server that dies (its `crash` tool exits the process) is started again."""
    monkeypatch.setattr(mcp_tools, "BACKOFF_MIN", 0.2, raising=False)
    spec = {"name": "t", "command": sys.executable, "args": [str(HERE / "mcp_test_server.py")],
            "timeout": 20}  # fmt: skip
    reg = ToolRegistry(ToolsConfig.from_dict({"mcp_servers": [spec]}))

    async def go() -> tuple:
        await reg.start()
        server = reg.mcp_servers["t"]
        try:
            crashed = await reg.run(ParsedCall("crash", {}))
            deadline = time.monotonic() + 60
            while server.connects < 2 or server.state != "up":
                assert time.monotonic() < deadline, f"not restarted: {server.last_error}"
                await asyncio.sleep(0.1)
            return crashed, await reg.run(ParsedCall("shout", {"text": "back"}))
        finally:
            await reg.close()

    crashed, after = asyncio.run(go())
    assert crashed.error == "exception"
    assert after.error is None and after.text == "BACK!"
