"""A server that survives its tools and its own shutdown: stuck sync tools do not slow
other requests, slow clients are cut off, and SIGTERM drains and exits 0."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import HERE, MODEL, LiveServer, call_text, start_server

from augserve.server.state import ServerLimits

USER = [{"role": "user", "content": "Hi"}]


def chat(**body: Any) -> dict:
    return {"model": MODEL, "messages": USER, "max_tokens": 4, **body}


@pytest.fixture(scope="module")
def srv(chat_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tools = {
        "tools": [
            {
                "name": "hang",
                "python": "augserve_test_tools:hang",
                "timeout": 12,
                "max_concurrency": 8,
            },  # fmt: skip
            {"name": "get_weather", "python": "augserve_test_tools:get_weather"},
        ]
    }
    path = tmp_path_factory.mktemp("robust") / "tools.json"
    path.write_text(json.dumps(tools))
    limits = ServerLimits(read_timeout=1.0, idle_timeout=1.0)
    s = start_server(chat_model_dir, path, limits=limits)
    yield s
    s.stop()


def test_stuck_sync_tools_do_not_slow_other_requests(srv: LiveServer) -> None:
    """8 requests wait in a sync tool that does not return (for 20 s, timeout 12 s). A
    plain request and another tool's call are served meanwhile (before the stuck calls
    time out): on the shared default executor they waited for the stuck threads."""
    finals: list[str] = []

    def stuck(seed: int) -> None:
        srv.script(seed, call_text("hang", seconds=20), "done")
        r = httpx.post(
            srv.url + "/v1/chat/completions",
            json=chat(seed=seed, max_tokens=200, server_tools=["hang"]),
            timeout=120,
        )
        finals.append(r.json()["choices"][0]["message"]["content"])

    threads = [threading.Thread(target=stuck, args=(700 + k,)) for k in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while srv.metric("augserve_num_requests", state="paused") < 8:
        assert time.monotonic() < deadline, "the 8 requests never reached their tool call"
        time.sleep(0.05)
    t0 = time.monotonic()
    plain = httpx.post(srv.url + "/v1/chat/completions", json=chat(max_tokens=4), timeout=60)
    plain_s = time.monotonic() - t0
    srv.script(800, call_text("get_weather", city="Oslo"), "sunny")
    t0 = time.monotonic()
    other = httpx.post(
        srv.url + "/v1/chat/completions",
        json=chat(seed=800, max_tokens=100, server_tools=["get_weather"]),
        timeout=60,
    )
    other_s = time.monotonic() - t0
    assert plain.status_code == 200 and plain_s < 3.0, plain_s
    assert other.status_code == 200 and other_s < 8.0, other_s
    assert other.json()["choices"][0]["message"]["content"] == "sunny"
    for t in threads:
        t.join(120)
    assert len(finals) == 8 and all(f == "done" for f in finals)  # told of the timeout
    assert srv.metric("augserve_tool_errors_total", tool="hang", kind="timeout") == 8
    srv.wait_idle()


def test_slow_clients_are_cut_off(srv: LiveServer) -> None:
    """A request head that never completes gets 408 after the read timeout; so does a
    body that stops; an idle keep-alive connection is closed."""
    with socket.create_connection(("127.0.0.1", srv.handle.port), timeout=20) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # no end of head
        assert sock.recv(200).startswith(b"HTTP/1.1 408")
    body = json.dumps(chat()).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", srv.handle.port), timeout=20) as sock:
        sock.sendall(head + body[:10])  # the rest never comes
        reply = b""
        while b"took over" not in reply and (part := sock.recv(2000)):
            reply += part
        assert reply.startswith(b"HTTP/1.1 408") and b"took over 1 s" in reply
    with socket.create_connection(("127.0.0.1", srv.handle.port), timeout=20) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while b"tool_servers" not in reply and (part := sock.recv(2000)):
            reply += part
        assert b"200 OK" in reply
        t0 = time.monotonic()
        assert sock.recv(100) == b""  # closed by the server when idle
        assert time.monotonic() - t0 < 15


# --- the process lifecycle ---------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(model_dir: Path, tmp: Path, grace: float) -> tuple[subprocess.Popen, str, Path]:
    tools = {
        "tools": [{"name": "get_weather", "python": "augserve_test_tools:get_weather"}],
        "mcp_servers": [
            {
                "name": "test",
                "command": sys.executable,
                "args": [str(HERE / "mcp_test_server.py")],
                "prefix": "mcp_",
            }  # fmt: skip
        ],
    }
    (tmp / "tools.json").write_text(json.dumps(tools))
    port = _free_port()
    cmd = [sys.executable, "-m", "augserve", "serve", "--model", str(model_dir),
           "--served-model-name", MODEL, "--port", str(port), "--threads", "1",
           "--dtype", "float32",
           "--tools", str(tmp / "tools.json"), "--shutdown-grace", str(grace),
           "--num-device-blocks", "256", "--log-level", "info"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    log = tmp / "server.log"
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url, log
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.2)


def _stream(url: str, events: list[dict], max_tokens: int) -> None:
    req = {**chat(max_tokens=max_tokens, ignore_eos=True), "stream": True}
    with (
        contextlib.suppress(httpx.HTTPError),  # a forced exit cuts the stream
        httpx.stream("POST", url + "/v1/chat/completions", json=req, timeout=120) as resp,
    ):
        for line in resp.iter_lines():
            if line.startswith("data: {"):
                events.append(json.loads(line[6:]))


def test_sigterm_drains_the_request_in_flight_and_exits_0(
    chat_model_dir: Path, tmp_path: Path
) -> None:
    proc, url, log = _serve(chat_model_dir, tmp_path, grace=120)
    try:
        events: list[dict] = []
        # long enough to be in flight while /health is asked: the tiny model decodes a
        # token in about a millisecond on the native attention kernel
        reader = threading.Thread(target=_stream, args=(url, events, 3500))
        reader.start()
        while len(events) < 3:
            assert reader.is_alive(), log.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        health = httpx.get(url + "/health", timeout=5)  # the listener is still open
        for _ in range(100):  # the signal is handled on the loop: at once, not instantly
            if health.status_code == 503:
                break
            time.sleep(0.02)
            health = httpx.get(url + "/health", timeout=5)
        refused = httpx.post(url + "/v1/chat/completions", json=chat(), timeout=5)
        assert reader.is_alive()  # still streaming: what follows is the drain
        reader.join(120)
        code = proc.wait(60)
        text = log.read_text()
        assert health.status_code == 503 and health.json()["status"] == "shutting down"
        assert refused.status_code == 503
        finals = [c["choices"][0]["finish_reason"] for c in events if c["choices"]]
        assert finals[-1] == "length"  # drained to its end, not cut
        assert code == 0, text
        assert "Traceback" not in text and "Error" not in text, text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_second_sigterm_exits_at_once(chat_model_dir: Path, tmp_path: Path) -> None:
    proc, url, log = _serve(chat_model_dir, tmp_path, grace=300)
    try:
        events: list[dict] = []
        reader = threading.Thread(target=_stream, args=(url, events, 1500), daemon=True)
        reader.start()
        while len(events) < 3:
            assert reader.is_alive(), log.read_text()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None  # draining: the long request would take minutes
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 128 + signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
