"""Bad input and faults: every bad request gets a 4xx with OpenAI's error object naming
the problem; failing tools answer the model with an error and the request goes on;
a client that leaves mid-stream (or mid-call) has its request aborted and its KV
freed; a wrong or missing API key gets 401."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import MODEL, POISON, LiveServer, call_text, start_server, write_tools

from augserve.server.state import ServerLimits

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def srv(chat_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    tools = write_tools(tmp_path_factory.mktemp("tools") / "tools.json")
    limits = ServerLimits(max_body_bytes=64 * 1024, max_tokens=2000)
    s = start_server(chat_model_dir, tools, api_key="sk-right", limits=limits, max_model_len=3072)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def http(srv: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=srv.url, headers={"Authorization": "Bearer sk-right"}, timeout=60
    ) as c:
        yield c


def chat(**body: Any) -> dict:
    return {"model": MODEL, "messages": USER, "max_tokens": 4, **body}


def assert_error(resp: httpx.Response, status: int, *words: str) -> dict:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    for w in words:
        assert w in err["message"], (w, err)
    return err


# --- bad requests ----------------------------------------------------------------------
def test_malformed_json(http: httpx.Client) -> None:
    r = http.post(
        "/v1/chat/completions",
        content=b'{"model": "x", "messages": [',
        headers={"content-type": "application/json"},
    )
    assert_error(r, 400, "not valid JSON")


def test_unknown_model(http: httpx.Client) -> None:
    err = assert_error(http.post("/v1/chat/completions", json=chat(model="gpt-9")), 404, "gpt-9")
    assert err["code"] == "model_not_found" and err["param"] == "model"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"temperature": 5}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"n": 0}, "n"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
        ({"stop": ["ok", ""]}, "stop"),
        ({"seed": "abc"}, "seed"),
    ],
)
def test_bad_parameter_values(http: httpx.Client, body: dict, param: str) -> None:
    err = assert_error(http.post("/v1/chat/completions", json=chat(**body)), 400, param)
    assert err["param"] == param


def test_unsupported_parameter(http: httpx.Client) -> None:
    err = assert_error(http.post("/v1/chat/completions", json=chat(best_of=3)), 400, "best_of")
    assert err["param"] == "best_of"


def test_context_too_long(http: httpx.Client) -> None:
    long = [{"role": "user", "content": "The quick brown fox. " * 1200}]
    err = assert_error(
        http.post("/v1/chat/completions", json=chat(messages=long)),
        400,
        "maximum context length is 3072",
    )
    assert err["code"] == "context_length_exceeded"
    half = [{"role": "user", "content": "The quick brown fox. " * 300}]  # ~1,500 tokens
    err = assert_error(
        http.post("/v1/chat/completions", json=chat(messages=half, max_tokens=1900)),
        400,
        "to generate",
    )
    assert err["code"] == "context_length_exceeded"
    assert_error(
        http.post("/v1/chat/completions", json=chat(max_tokens=2001)),
        400,
        "max_tokens must be <= 2000",
    )


def test_unknown_tool_name(http: httpx.Client) -> None:
    body = chat(tool_choice={"type": "function", "function": {"name": "teleport"}})
    err = assert_error(http.post("/v1/chat/completions", json=body), 400, "teleport")
    assert err["param"] == "tool_choice.function.name"


def test_invalid_tool_arguments(http: httpx.Client) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{a: 1"}}
    msgs = [
        *USER,
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "2"},
    ]
    err = assert_error(
        http.post("/v1/chat/completions", json=chat(messages=msgs)),
        400,
        "invalid tool arguments for 'add'",
    )
    assert err["param"] == "messages.1.tool_calls.0.function.arguments"
    bad_schema = [{"type": "function", "function": {"name": "f", "parameters": {"type": 7}}}]
    assert_error(
        http.post("/v1/chat/completions", json=chat(tools=bad_schema)),
        400,
        "not a valid JSON schema",
    )
    dup = [{"type": "function", "function": {"name": "f"}}] * 2
    assert_error(http.post("/v1/chat/completions", json=chat(tools=dup)), 400, "declared twice")


def test_text_that_is_not_unicode(http: httpx.Client) -> None:
    """A JSON escape of a lone surrogate is valid JSON but not valid text."""
    cases = [
        (
            "/v1/chat/completions",
            "messages",
            b'{"model": "test-model", "messages": [{"role": "user", "content": "a\\ud800"}]}',
        ),
        ("/v1/completions", "prompt", b'{"model": "test-model", "prompt": "a\\udfff b"}'),
        (
            "/v1/chat/completions",
            "model",
            b'{"model": "\\ud800", "messages": [{"role": "user", "content": "a"}]}',
        ),
    ]
    for path, param, body in cases:
        r = http.post(path, content=body, headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500 and r.json()["error"]["param"] == param, r.text


def test_completions_bad_input(http: httpx.Client) -> None:
    assert_error(
        http.post("/v1/completions", json={"model": MODEL, "prompt": [10**6]}),
        400,
        "outside the vocabulary",
    )
    assert_error(http.post("/v1/completions", json={"model": MODEL, "prompt": ""}), 400, "prompt")
    assert_error(
        http.post("/v1/completions", json={"model": MODEL, "prompt": "x", "suffix": "y"}),
        400,
        "suffix",
    )


def test_body_size_limit_and_unknown_route(http: httpx.Client) -> None:
    big = chat(messages=[{"role": "user", "content": "x" * 70_000}])
    assert_error(http.post("/v1/chat/completions", json=big), 413, "larger than 65536 bytes")

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while it streams in
        yield b'{"model": "test-model", "messages": [{"role": "user", "content": "'
        for _ in range(70):
            yield b"x" * 1000
        yield b'"}]}'

    r = http.post(
        "/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"}
    )
    assert_error(r, 413, "larger than")
    assert_error(http.get("/v1/nothing"), 404, "no route")


# --- auth ------------------------------------------------------------------------------
def test_api_key(srv: LiveServer) -> None:
    url = srv.url + "/v1/chat/completions"
    err = assert_error(httpx.post(url, json=chat()), 401, "missing API key")
    assert err["type"] == "authentication_error"
    assert_error(
        httpx.post(url, json=chat(), headers={"Authorization": "Bearer nope"}),
        401,
        "invalid API key",
    )
    assert_error(httpx.get(srv.url + "/v1/models", headers={"Authorization": "Basic x"}), 401)
    assert httpx.get(srv.url + "/health").status_code == 200  # open, as in vLLM
    assert httpx.get(srv.url + "/metrics").status_code == 200


# --- failing tools -----------------------------------------------------------------------
def test_failing_tools_answer_the_model_and_the_request_goes_on(
    srv: LiveServer, http: httpx.Client
) -> None:
    srv.script(
        500,
        call_text("boom", x="now"),
        call_text("sleepy", seconds=3),
        call_text("garbage"),
        call_text("get_weather"),  # missing a required argument
        call_text("no_such_tool", q=1),
        "<tool_call>{not json}</tool_call>",
        "Still here.",
    )
    body = chat(seed=500, max_tokens=600, tool_trace=True, server_tools="all")
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == "Still here." and choice["finish_reason"] == "stop"
    kinds = [(t["name"], t["error"]) for t in choice["tool_trace"]]
    assert kinds == [
        ("boom", "exception"),
        ("sleepy", "timeout"),
        ("garbage", "bad_result"),
        ("get_weather", "invalid_arguments"),
        ("no_such_tool", "unknown_tool"),
        ("", "invalid_call"),
    ]
    assert all(t["result"].startswith("Error: ") for t in choice["tool_trace"])
    assert "RuntimeError: boom now" in choice["tool_trace"][0]["result"]
    assert choice["tool_trace"][1]["duration"] < 1.0  # the hung tool was cut at 0.3 s
    assert srv.metric("augserve_tool_errors_total", tool="boom", kind="exception") >= 1
    assert srv.metric("augserve_tool_errors_total", tool="sleepy", kind="timeout") >= 1
    assert srv.metric("augserve_tool_errors_total", tool="<unknown>", kind="unknown_tool") >= 1
    ok = http.post("/v1/chat/completions", json=chat(temperature=0))  # the server is fine
    assert ok.status_code == 200
    srv.wait_idle()


def test_client_tools_never_name_server_code(
    srv: LiveServer, http: httpx.Client, tmp_path: Path
) -> None:
    """Extra fields in a declared tool are never read as a callable or a URL."""
    marker = tmp_path / "pwned"
    tools = [
        {
            "type": "function",
            "python": "os:system",
            "url": "http://127.0.0.1:1/",
            "function": {
                "name": "run_shell",
                "python": "os:system",
                "parameters": {"type": "object"},
            },
        }
    ]
    srv.script(501, call_text("run_shell", command=f"touch {marker}"))
    r = http.post("/v1/chat/completions", json=chat(seed=501, max_tokens=200, tools=tools))
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "run_shell"
    assert not marker.exists()


# --- client disconnect ------------------------------------------------------------------
def test_disconnect_mid_stream_aborts_and_frees_kv(srv: LiveServer) -> None:
    srv.wait_idle()
    aborted = srv.metric("augserve_requests_finished_total", finish_reason="abort")
    body = chat(max_tokens=600, ignore_eos=True, temperature=0, stream=True)
    headers = {"Authorization": "Bearer sk-right"}
    with httpx.Client(base_url=srv.url, headers=headers, timeout=60) as c:
        with c.stream("POST", "/v1/chat/completions", json=body) as resp:
            got = 0
            for line in resp.iter_lines():
                got += line.startswith("data: ")
                if got >= 5:
                    break
        assert srv.metric("augserve_kv_blocks_used", location="device") > 0 or not srv.state.live
    srv.wait_idle()
    assert srv.metric("augserve_requests_finished_total", finish_reason="abort") == aborted + 1


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_disconnect_during_a_tool_call(srv: LiveServer, stream: bool) -> None:
    """A client that leaves while its request is paused in a (slow) tool call."""
    srv.wait_idle()
    aborted = srv.metric("augserve_requests_finished_total", finish_reason="abort")
    srv.script(502, call_text("slow_weather", seconds=3), "never")
    body = json.dumps(
        chat(seed=502, max_tokens=300, stream=stream, server_tools=["slow_weather"])
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-right"
        f"\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", srv.handle.port))
    sock.sendall(head.encode() + body)
    deadline = time.monotonic() + 20
    while srv.metric("augserve_num_requests", state="paused") != 1:
        assert time.monotonic() < deadline, "the request never reached its tool call"
        time.sleep(0.05)
    sock.close()  # gone while the tool runs
    srv.wait_idle(timeout=10)
    assert srv.metric("augserve_requests_finished_total", finish_reason="abort") == aborted + 1
    assert srv.metric("augserve_num_requests", state="paused") == 0


# --- a failed engine --------------------------------------------------------------------
def test_failed_forward_aborts_its_batch_and_the_next_request_succeeds(
    chat_model_dir: Path,
) -> None:
    """A poisoned request makes its forward raise: it gets a 500 (an error event when
    streaming), its KV is freed, and the next request is served. Only failures in a row
    turn /health to 503, and a good step turns it back."""
    s = start_server(chat_model_dir, max_model_len=1024)
    try:
        r = httpx.post(s.url + "/v1/chat/completions", json=chat(seed=POISON), timeout=30)
        assert_error(r, 500, "generation failed")
        assert "the forward failed" in r.json()["error"]["message"]
        with httpx.stream(
            "POST", s.url + "/v1/chat/completions", timeout=30,
            json=chat(seed=POISON, stream=True),
        ) as resp:  # fmt: skip
            assert resp.status_code == 200
            lines = [line for line in resp.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        assert any('"error"' in line and "generation failed" in line for line in lines)
        s.wait_idle()  # the failed requests' KV is freed
        assert httpx.get(s.url + "/health").status_code == 200  # two failures, not three
        # ignore_eos: unseeded random weights may sample EOS inside 5 tokens
        ok = httpx.post(
            s.url + "/v1/chat/completions", json=chat(max_tokens=5, ignore_eos=True), timeout=30
        )
        assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] == "length"
        for _ in range(3):
            bad = httpx.post(s.url + "/v1/chat/completions", json=chat(seed=POISON), timeout=30)
            assert bad.status_code == 500
        health = httpx.get(s.url + "/health")
        assert health.status_code == 503 and "3 engine steps failed" in health.json()["status"]
        assert s.metric("augserve_engine_failed_steps_total") == 5
        assert s.metric("augserve_requests_finished_total", finish_reason="error") == 5
        ok = httpx.post(s.url + "/v1/chat/completions", json=chat(max_tokens=5), timeout=30)
        assert ok.status_code == 200  # still serving, and a good step heals it
        assert httpx.get(s.url + "/health").json()["status"] == "ok"
        s.wait_idle()
    finally:
        s.stop()
