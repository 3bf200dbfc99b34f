"""Server-side tools: the tools file, Python and HTTP runners, and the registry's
guarantees (schema checks, timeouts, concurrency limits, error results, no crash)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import augserve_test_tools as sample
import pytest

from augserve.engine.tool_parsers import InvalidCall
from augserve.engine.tools import ParsedCall
from augserve.server.registered_tool import ToolOutcome
from augserve.server.tool_config import ToolsConfig
from augserve.server.tool_registry import ToolRegistry


def py_tool(name: str, fn: str, **extra: object) -> dict:
    return {"name": name, "python": f"augserve_test_tools:{fn}", **extra}


def run(reg: ToolRegistry, name: str, **args: object) -> ToolOutcome:
    return asyncio.run(reg.run(ParsedCall(name, dict(args))))


# --- the tools file ------------------------------------------------------------------
def test_tools_file_yaml_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEARCH_TOKEN", "s3cret")
    y = tmp_path / "tools.yaml"
    y.write_text(
        "defaults: {timeout: 7, max_concurrency: 3}\n"
        "allowed_hosts: [api.example.com]\n"
        "tools:\n"
        "  - {name: w, python: 'augserve_test_tools:get_weather', timeout: 2}\n"
        "  - name: s\n"
        "    http: {url: 'https://api.example.com/s/{q}', method: get,\n"
        "           headers: {Authorization: 'Bearer ${SEARCH_TOKEN}'}}\n"
        "mcp_servers:\n"
        "  - {name: m, command: python, args: [-m, x], prefix: 'm_', tools: [a]}\n"
        "  - {name: r, url: 'http://127.0.0.1:9/mcp'}\n"
    )
    cfg = ToolsConfig.from_file(y)
    w, s = cfg.tools
    assert (w.limits.timeout, w.limits.max_concurrency) == (2.0, 3)
    assert s.http is not None and s.http.method == "GET" and s.limits.timeout == 7.0
    assert dict(s.http.headers)["Authorization"] == "Bearer s3cret"
    m, r = cfg.mcp_servers
    assert m.args == ("-m", "x") and m.tools == ("a",) and m.prefix == "m_"
    assert r.url == "http://127.0.0.1:9/mcp" and r.command is None
    j = tmp_path / "tools.json"
    j.write_text(json.dumps({"tools": [py_tool("w", "get_weather")]}))
    assert ToolsConfig.from_file(j).tools[0].python == "augserve_test_tools:get_weather"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"toolz": []}, "unknown keys"),
        ({"tools": [py_tool("bad name!", "add")]}, "name must match"),
        ({"tools": [py_tool("a", "add"), py_tool("a", "boom")]}, "duplicate tool names"),
        ({"tools": [{"name": "a"}]}, "exactly one of 'python' or 'http'"),
        ({"tools": [{"name": "a", "python": "no_colon"}]}, "module:function"),
        ({"tools": [py_tool("a", "add", timeout=0)]}, "timeout must be a number > 0"),
        ({"tools": [py_tool("a", "add", max_concurrency=0)]}, "max_concurrency"),
        ({"tools": [{"name": "h", "http": {"url": "https://evil.com/x"}}]}, "not in allowed_hosts"),
        (
            {
                "allowed_hosts": ["a.com"],
                "tools": [{"name": "h", "http": {"url": "https://{h}/x"}}],
            },
            "path only",
        ),
        (
            {"allowed_hosts": ["a.com"], "tools": [{"name": "h", "http": {"url": "ftp://a.com"}}]},
            "http(s) URL",
        ),
        (
            {
                "allowed_hosts": ["a.com"],
                "tools": [{"name": "h", "http": {"url": "https://a.com", "method": "TRACE"}}],
            },
            "method",
        ),
        ({"mcp_servers": [{"name": "m", "command": "x", "url": "http://a/mcp"}]}, "exactly one"),
        ({"mcp_servers": [{"name": "m"}]}, "exactly one"),
    ],
)
def test_tools_file_errors_name_the_problem(data: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ToolsConfig.from_dict(data)


def test_tools_file_that_is_not_yaml(tmp_path: Path) -> None:
    p = tmp_path / "t.yaml"
    p.write_text("tools: [unclosed\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        ToolsConfig.from_file(p)
    with pytest.raises(FileNotFoundError, match="tools file not found"):
        ToolsConfig.from_file(tmp_path / "missing.yaml")


def test_unimportable_callable_fails_at_start() -> None:
    cfg = ToolsConfig.from_dict({"tools": [{"name": "x", "python": "no_such_module_xyz:f"}]})
    with pytest.raises(ValueError, match="cannot import 'no_such_module_xyz'"):
        ToolRegistry(cfg)
    cfg = ToolsConfig.from_dict({"tools": [py_tool("x", "not_there")]})
    with pytest.raises(ValueError, match="has no 'not_there'"):
        ToolRegistry(cfg)


# --- Python tools --------------------------------------------------------------------
def registry(*tools: dict, **top: object) -> ToolRegistry:
    return ToolRegistry(ToolsConfig.from_dict({"tools": list(tools), **top}))


def test_python_tools_run_with_schemas_from_signatures() -> None:
    reg = registry(py_tool("get_weather", "get_weather"), py_tool("add", "add"))
    (d,) = [t for t in reg.definitions() if t["function"]["name"] == "get_weather"]
    params = d["function"]["parameters"]
    assert params["properties"] == {"city": {"type": "string"}, "unit": {"type": "string"}}
    assert (
        params["required"] == ["city"] and d["function"]["description"] == "The weather in a city."
    )
    out = run(reg, "get_weather", city="Paris")
    assert out.error is None and json.loads(out.text) == {"city": "Paris", "temp": 21, "unit": "C"}
    assert run(reg, "add", a=2, b=40).text == "42"


def test_failing_tools_become_error_results() -> None:
    reg = registry(
        py_tool("add", "add"),
        py_tool("boom", "boom"),
        py_tool("sleepy", "sleepy", timeout=0.2),
        py_tool("garbage", "garbage"),
        py_tool("bad_bytes", "bad_bytes"),
        py_tool("huge", "huge"),
        py_tool("exits", "exits"),
        max_result_chars=1000,
    )
    cases = {
        "boom": ({"x": "now"}, "exception", "RuntimeError: boom now"),
        "sleepy": ({"seconds": 2}, "timeout", "timed out after 0.2 s"),
        "garbage": ({}, "bad_result", "not text or JSON"),
        "bad_bytes": ({}, "bad_result", "not UTF-8"),
        "exits": ({}, "exception", "SystemExit"),
        "add": ({"a": "two", "b": 1}, "invalid_arguments", "a: 'two' is not of type 'integer'"),
        "nope": ({}, "unknown_tool", "no tool named 'nope'"),
    }
    for name, (args, kind, text) in cases.items():
        out = run(reg, name, **args)
        assert out.error == kind, (name, out)
        assert out.text.startswith("Error: ") and text in out.text, (name, out.text)
    missing = run(reg, "add", a=1)
    assert missing.error == "invalid_arguments" and "'b' is a required property" in missing.text
    extra = run(reg, "add", a=1, b=2, c=3)
    assert extra.error == "invalid_arguments" and "'c' was unexpected" in extra.text
    cut = run(reg, "huge")
    assert cut.error is None and len(cut.text) < 1100 and "100000 characters" in cut.text
    broken = asyncio.run(reg.run(InvalidCall("", {}, "<tool_call>{x</tool_call>", "bad JSON")))
    assert broken.error == "invalid_call" and broken.text == "Error: bad JSON"
    assert run(reg, "add", a=1, b=1).text == "2"  # the registry is still fine


def test_per_tool_concurrency_limit() -> None:
    reg = registry(py_tool("slow", "slow_counted", max_concurrency=2))
    seen: list[ToolOutcome] = []
    reg.observers.append(seen.append)
    sample.peak = 0

    async def many() -> list[ToolOutcome]:
        return list(
            await asyncio.gather(*(reg.run(ParsedCall("slow", {"ms": 60})) for _ in range(6)))
        )

    outs = asyncio.run(many())
    assert all(o.error is None and o.text == "60" for o in outs)
    assert sample.peak == 2
    assert len(seen) == 6 and all(o.duration >= 0.05 for o in seen)


# --- HTTP tools ----------------------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _reply(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.startswith("/redirect"):
            return self._reply(302, b"", {"Location": "http://evil.example/"})
        if self.path.startswith("/fail"):
            return self._reply(500, b"backend exploded")
        echo = {"path": self.path, "auth": self.headers.get("Authorization")}
        self._reply(200, json.dumps(echo).encode())

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length", 0))
        self._reply(200, json.dumps({"body": json.loads(self.rfile.read(n))}).encode())


@pytest.fixture(scope="module")
def http_backend() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_http_tools(http_backend: str) -> None:
    def http(name: str, path: str, method: str = "GET") -> dict:
        return {
            "name": name,
            "timeout": 5,
            "http": {
                "url": http_backend + path,
                "method": method,
                "headers": {"Authorization": "Bearer k"},
            },
        }

    reg = registry(
        http("get", "/users/{user}"),
        http("post", "/p", "POST"),
        http("fail", "/fail"),
        http("redirect", "/redirect"),
        allowed_hosts=["127.0.0.1"],
    )

    async def calls() -> list[ToolOutcome]:
        try:
            return [
                await reg.run(ParsedCall("get", {"user": "admin?x=1#f", "q": "a b"})),
                await reg.run(ParsedCall("post", {"x": [1, 2]})),
                await reg.run(ParsedCall("fail", {})),
                await reg.run(ParsedCall("redirect", {})),
            ]
        finally:
            await reg.close()

    got, posted, failed, redirected = asyncio.run(calls())
    echo = json.loads(got.text)
    # a path argument is quoted: it cannot add a query (climbing: test_tool_escape.py)
    assert echo["path"] == "/users/admin%3Fx%3D1%23f?q=a+b" and echo["auth"] == "Bearer k"
    assert json.loads(posted.text) == {"body": {"x": [1, 2]}}
    assert failed.error == "exception" and "HTTP 500" in failed.text and "exploded" in failed.text
    assert redirected.error == "exception" and "HTTP 302" in redirected.text


# --- MCP over streamable HTTP (stdio is covered end to end) ----------------------------
def test_mcp_over_streamable_http(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = Path(__file__).with_name("mcp_test_server.py")
    log = (tmp_path / "mcp.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, str(server), "--http", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None and time.monotonic() < deadline, "MCP server did not start"
            time.sleep(0.1)
        cfg = ToolsConfig.from_dict(
            {
                "mcp_servers": [
                    {"name": "web", "url": f"http://127.0.0.1:{port}/mcp", "tools": ["add", "fail"]}
                ]
            }
        )
        reg = ToolRegistry(cfg)

        async def use() -> list[ToolOutcome]:
            await reg.start()
            try:
                assert sorted(reg.tools) == ["add", "fail"]  # filtered: no "shout"
                return [
                    await reg.run(ParsedCall("add", {"a": 20, "b": 22})),
                    await reg.run(ParsedCall("fail", {"reason": "on purpose"})),
                    await reg.run(ParsedCall("add", {"a": 1})),
                ]
            finally:
                await reg.close()

        added, failed, missing = asyncio.run(use())
        assert (added.error, added.text) == (None, "42")
        assert failed.error == "exception" and failed.text.startswith("Error: 'fail' failed")
        assert missing.error == "invalid_arguments" and "'b' is a required property" in missing.text
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_unreachable_mcp_server_fails_at_start() -> None:
    cfg = ToolsConfig.from_dict(
        {"mcp_servers": [{"name": "gone", "command": "/nonexistent/mcp-server", "timeout": 5}]}
    )
    with pytest.raises(ValueError, match="MCP server 'gone'.*cannot connect"):
        asyncio.run(ToolRegistry(cfg).start())
