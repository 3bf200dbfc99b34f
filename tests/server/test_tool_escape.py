"""Tools that try to escape their limits: an async tool that swallows its cancellation
(abandoned at its deadline, its late result dropped), an async tool that blocks its
loop (it is not the server's), BaseExceptions (error answers), isolated tools whose
children outlive them (the whole process group is killed), and a server process
whose tools fork, interrupt and hang (SIGTERM still drains, the process exits, the
port is free)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import augserve_test_tools as sample
import httpx
import pytest

from augserve.engine.tools import ParsedCall
from augserve.server.registered_tool import ToolOutcome
from augserve.server.tool_config import ToolsConfig
from augserve.server.tool_registry import ToolRegistry

HERE = Path(__file__).resolve().parent


def py_tool(name: str, fn: str, **extra: object) -> dict:
    return {"name": name, "python": f"augserve_test_tools:{fn}", **extra}


def registry(*tools: dict) -> ToolRegistry:
    return ToolRegistry(ToolsConfig.from_dict({"tools": list(tools)}))


def test_async_tool_that_swallows_cancellation_is_abandoned_at_its_deadline() -> None:
    """It catches CancelledError and goes on (until released, or 20 s): the model gets
    the timeout at 0.3 s, and the result it returns later is never read."""
    sample.stubborn_done.clear()
    sample.stubborn_release.clear()
    reg = registry(py_tool("stubborn", "stubborn", timeout=0.3))
    out = asyncio.run(reg.run(ParsedCall("stubborn", {"seconds": 20.0})))
    assert out.error == "timeout" and "timed out after 0.3 s" in out.text
    assert not sample.stubborn_done.is_set()  # answered while the tool still ran
    assert reg.loops["stubborn"].running == 1  # abandoned, running on its own loop
    sample.stubborn_release.set()
    assert sample.stubborn_done.wait(30)  # it ended by itself; its result went nowhere
    reg.loops["stubborn"].close()


def test_async_tool_that_blocks_its_loop_does_not_block_the_servers() -> None:
    """The tool blocks the loop it runs on until the server's loop releases it: on the
    server's own loop that could never happen (it would say "blocked" after 10 s)."""
    sample.entered.clear()
    sample.release.clear()
    reg = registry(py_tool("blocks", "blocks_its_loop", timeout=20))

    async def go() -> ToolOutcome:
        call = asyncio.ensure_future(reg.run(ParsedCall("blocks", {})))
        while not sample.entered.is_set():
            await asyncio.sleep(0.01)  # this loop still runs while the tool blocks
        sample.release.set()
        return await call

    out = asyncio.run(go())
    assert out.error is None and out.text == "released"
    assert reg.threads["blocks"].num_threads == 0  # async: not on the tool's thread pool


@pytest.mark.parametrize(
    ("fn", "kind"),
    [
        ("interrupt", "KeyboardInterrupt"),
        ("interrupt_async", "KeyboardInterrupt"),
        ("exits", "SystemExit"),
        ("exits_async", "SystemExit"),
    ],
)
def test_base_exceptions_from_a_tool_are_error_answers(fn: str, kind: str) -> None:
    reg = registry(py_tool("t", fn), py_tool("w", "get_weather"))

    async def go() -> tuple[ToolOutcome, ToolOutcome]:
        bad = await reg.run(ParsedCall("t", {}))
        return bad, await reg.run(ParsedCall("w", {"city": "Oslo"}))  # the loop goes on

    bad, after = asyncio.run(go())
    assert bad.error == "exception" and kind in bad.text, bad.text
    assert after.error is None and "Oslo" in after.text


def _gone(pid: int, timeout: float = 20.0) -> bool:
    """The process ended (a zombie counts: it runs nothing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            return True
        if "\nState:\tZ" in status:
            return True
        time.sleep(0.05)
    return False


def test_isolated_tool_dies_with_its_children_at_timeout_and_at_exit(tmp_path: Path) -> None:
    """The whole process group goes: a `sleep` the tool started dies with the worker
    killed at the timeout, and a background one it left dies when the registry closes."""
    hung_pid, left_pid = tmp_path / "hung.pid", tmp_path / "left.pid"
    reg = registry(
        py_tool("hangs", "spawns_and_hangs", isolate=True, timeout=1.0),
        py_tool("spawns", "spawns", isolate=True),
    )

    async def go() -> tuple[ToolOutcome, ToolOutcome]:
        await reg.start()
        try:
            hung = await reg.run(ParsedCall("hangs", {"path": str(hung_pid)}))
            left = await reg.run(ParsedCall("spawns", {"path": str(left_pid)}))
            assert not _gone(int(left_pid.read_text()), timeout=0.2)  # alive while we run
            return hung, left
        finally:
            await reg.close()

    pids: list[int] = []
    try:
        hung, left = asyncio.run(go())
        pids = [int(hung_pid.read_text()), int(left_pid.read_text())]
        assert hung.error == "timeout" and left.error is None
        assert _gone(pids[0]), "the hung tool's child outlived its killed worker"
        assert _gone(pids[1]), "the tool's background child outlived the server's tools"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# --- a whole server process --------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(model_dir: Path, tmp: Path) -> tuple[subprocess.Popen, str, Path, int]:
    tools = {
        "tools": [
            py_tool("interrupt", "interrupt"),
            py_tool("forker", "forker"),
            py_tool("stubborn", "stubborn_forever", timeout=600),
            py_tool("hang", "hang_forever", timeout=600),
        ]
    }
    (tmp / "tools.json").write_text(json.dumps(tools))
    port = _free_port()
    cmd = [sys.executable, "-m", "augserve", "serve", "--model", str(model_dir),
           "--served-model-name", "test-model", "--port", str(port), "--threads", "1",
           "--dtype", "float32", "--profile", "default", "--tools", str(tmp / "tools.json"),
           "--shutdown-grace", "1", "--num-device-blocks", "256"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    env["AUGSERVE_TEST_PIDS"] = str(tmp / "children.pids")
    log = tmp / "server.log"
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url, log, port
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.2)


def _forced(url: str, tool: str, timeout: float = 120) -> httpx.Response:
    """A request whose first turn is a call of `tool` (the grammar writes it)."""
    body = {"model": "test-model", "messages": [{"role": "user", "content": "Go."}],
            "max_tokens": 120, "seed": 1, "tool_trace": True, "server_tools": [tool],
            "tool_choice": {"type": "function", "function": {"name": tool}}}  # fmt: skip
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=timeout)


def test_a_server_whose_tools_interrupt_fork_and_hang_still_shuts_down(
    chat_model_dir: Path, tmp_path: Path
) -> None:
    """KeyboardInterrupt from a tool is an error answer; a forked child does not keep
    the port; with calls hung in a thread and in a task that swallows cancellation,
    SIGTERM drains (grace 1 s) and the process exits, whatever the tools still do."""
    proc, url, log, port = _start(chat_model_dir, tmp_path)
    children: list[int] = []
    try:
        r = _forced(url, "interrupt")
        assert r.status_code == 200, r.text
        (step,) = r.json()["choices"][0]["tool_trace"][:1]
        assert step["error"] == "exception" and "KeyboardInterrupt" in step["result"]
        r = _forced(url, "forker")
        assert r.status_code == 200 and r.json()["choices"][0]["tool_trace"][0]["error"] is None
        children = [int(x) for x in (tmp_path / "children.pids").read_text().split()]
        hung = [threading.Thread(target=_forced, args=(url, t, 600), daemon=True)
                for t in ("stubborn", "hang")]  # fmt: skip
        for t in hung:
            t.start()
        deadline = time.monotonic() + 120
        while 'augserve_num_requests{state="paused"} 2.0' not in httpx.get(url + "/metrics").text:
            assert time.monotonic() < deadline, "the two calls never started"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)  # the tools would run for 10 minutes
        text = log.read_text()
        assert code in (0, -signal.SIGTERM), text
        assert "Application shutdown complete" in text and "Traceback" not in text, text
        with socket.socket() as s:  # no forked child holds the listening socket
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# --- HTTP placeholders and python: entries ------------------------------------------------
@pytest.mark.parametrize(
    "value",
    ["../admin", "..", "a/b", "%2e%2e", "%2E%2E%2Fadmin", "%252e%252e", "a%2fb", "a\\b",
     "x\x00y", "x%0Ay", "x%7fy"],
)  # fmt: skip
def test_http_placeholders_cannot_climb_the_path(value: str) -> None:
    """Refused before any request is sent (the host is unreachable: nothing may go)."""
    reg = ToolRegistry(
        ToolsConfig.from_dict(
            {
                "allowed_hosts": ["127.0.0.1"],
                "tools": [{"name": "get", "http": {"url": "http://127.0.0.1:9/items/{item}"}}],
            }
        )
    )
    out = asyncio.run(reg.run(ParsedCall("get", {"item": value})))
    assert out.error == "invalid_arguments" and "argument 'item'" in out.text, out.text


@pytest.mark.parametrize(
    "target",
    ["os:system", "builtins:eval", "subprocess:run", "shutil:rmtree", "sys:exit",
     "importlib:import_module", "ctypes:CDLL", "pickle:loads", "marshal:loads",
     "socket:create_connection", "os.path:join"],
)  # fmt: skip
def test_python_entries_of_unsafe_modules_are_refused_at_load(target: str) -> None:
    tools = [{"name": "t", "python": target}]
    with pytest.raises(ValueError, match="allow_unsafe") as err:
        ToolsConfig.from_dict({"tools": tools})
    assert "tool 't'" in str(err.value)
    assert ToolsConfig.from_dict({"tools": tools, "allow_unsafe": True}).allow_unsafe


def test_a_reexported_unsafe_callable_is_refused_too(tmp_path: Path) -> None:
    (tmp_path / "reexports.py").write_text("from os import system\nfrom builtins import eval\n")
    for fn in ("system", "eval"):
        path = tmp_path / f"{fn}.yaml"
        path.write_text(f"tools:\n  - {{name: t, python: 'reexports:{fn}'}}\n")
        with pytest.raises(ValueError, match="comes from the module"):
            ToolRegistry(ToolsConfig.from_file(path))
    path.write_text(f"allow_unsafe: true\ntools:\n  - {{name: t, python: 'reexports:{fn}'}}\n")
    assert "t" in ToolRegistry(ToolsConfig.from_file(path)).tools
