"""Requests built to stop the server (issue: one request froze /health for minutes):
each is refused by a cheap check with a 400 naming the field and the limit, or
prepared off the event loop (`server/preparation.py`), while /health and plain
requests are served. Concurrency is shown by events (a compile blocked on an Event),
never by wall time; time bounds here are generous timeouts only."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import MODEL, LiveServer, start_server

from augserve.engine.sampling_params import GrammarSpec
from augserve.server.input_limits import PrepLimits
from augserve.server.preparation import Preparer

USER = [{"role": "user", "content": "Answer."}]


@pytest.fixture(scope="module")
def srv(chat_model_dir: Path) -> Iterator[LiveServer]:
    s = start_server(chat_model_dir)
    yield s
    s.stop()


def _schema_format(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def _chat(srv: LiveServer, timeout: float = 60, **body: Any) -> httpx.Response:
    body = {"model": MODEL, "messages": USER, "max_tokens": 2, **body}
    return httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=timeout)


def _health(srv: LiveServer) -> int:
    return httpx.get(srv.url + "/health", timeout=10).status_code


class BlockedCompile:
    """Makes the engine's grammar compiles wait on an Event (a compile that takes as
    long as the test wants), counting them."""

    def __init__(self, srv: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
        self.masker = srv.state.engine.engine.grammars
        self.started = threading.Event()
        self.release = threading.Event()
        self.calls = 0
        real = self.masker._compile

        def compile_(spec: GrammarSpec) -> Any:
            self.calls += 1
            self.started.set()
            assert self.release.wait(120), "the test never released the compile"
            return real(spec)

        monkeypatch.setattr(self.masker, "_compile", compile_)


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def test_a_200000_value_enum_is_a_400_naming_the_limit(srv: LiveServer) -> None:
    schema = {"type": "string", "enum": [f"v{i}" for i in range(200_000)]}
    r = _chat(srv, response_format=_schema_format(schema))  # 2.6 MB: under the body limit
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "response_format.json_schema.schema"
    assert err["code"] == "schema_too_large" and "--max-schema-bytes" in err["message"]
    # under the byte limit, the enum count is the limit that names itself
    schema = {"type": "string", "enum": [str(i) for i in range(5_000)]}
    err = _chat(srv, response_format=_schema_format(schema)).json()["error"]
    assert "5000 values" in err["message"] and "--max-enum-values" in err["message"]
    assert _health(srv) == 200


def test_2000_tools_are_a_400_naming_the_limit_before_any_compile(
    srv: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = BlockedCompile(srv, monkeypatch)
    blocked.release.set()
    params = {"type": "object", "properties": {"x": {"type": "integer"}}}
    tools = [
        {"type": "function", "function": {"name": f"t{i}", "parameters": params}}
        for i in range(2000)
    ]
    r = _chat(srv, tools=tools, tool_choice="required")
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "tools" and "--max-tools-per-request" in err["message"]
    assert "2000 tools" in err["message"] and blocked.calls == 0


def test_a_3_9_mb_tokenize_is_a_400_before_tokenizing(srv: LiveServer) -> None:
    text = "All work and no play makes Jack a dull boy. " * 90_000  # 3.96 MB
    body = {"model": MODEL, "prompt": text}
    r = httpx.post(srv.url + "/tokenize", json=body, timeout=60)
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "prompt" and err["code"] == "context_length_exceeded"
    r = _chat(srv, messages=[{"role": "user", "content": text}])
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    small = httpx.post(srv.url + "/tokenize", json={"prompt": "hello"}, timeout=30)
    assert small.status_code == 200 and small.json()["count"] > 0


def test_health_and_plain_requests_are_served_while_a_compile_runs(
    srv: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = BlockedCompile(srv, monkeypatch)
    schema = {"type": "object", "properties": {"while_blocked": {"type": "integer"}}}
    t, out = _in_thread(lambda: _chat(srv, response_format=_schema_format(schema), timeout=120))
    assert blocked.started.wait(60), "the compile never started"
    try:
        for _ in range(3):  # the compile is running (blocked): the loop is free
            assert _health(srv) == 200
        plain = httpx.post(
            srv.url + "/v1/completions",
            json={"model": MODEL, "prompt": "hi", "max_tokens": 2},
            timeout=60,
        )
        assert plain.status_code == 200, plain.text
        tok = httpx.post(srv.url + "/tokenize", json={"prompt": "hello"}, timeout=30)
        assert tok.status_code == 200
        assert not out  # the constrained request is still waiting on its compile
    finally:
        blocked.release.set()
    t.join(120)
    assert out and out[0].status_code == 200, out


def test_a_compile_past_its_budget_is_a_400_and_its_result_is_dropped(
    srv: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = BlockedCompile(srv, monkeypatch)
    prep = srv.state.preparer
    monkeypatch.setattr(prep, "limits", replace(prep.limits, grammar_timeout=0.5))
    schema = {"type": "object", "properties": {"too_slow": {"type": "boolean"}}}
    try:
        r = _chat(srv, response_format=_schema_format(schema))
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["code"] == "grammar_too_complex"
        assert err["param"] == "response_format.json_schema.schema"
        assert "--grammar-compile-timeout" in err["message"]
        assert blocked.started.is_set() and _health(srv) == 200
    finally:
        blocked.release.set()
    done = threading.Event()
    for _ in range(600):  # until the abandoned compile has finished in its thread
        if prep.compiles.pending == 0:
            done.set()
            break
        done.wait(0.05)
    assert done.is_set()
    spec = GrammarSpec("json_schema", json.dumps(schema))
    assert blocked.masker.cache.get(spec) is None  # dropped, never cached
    assert srv.metric("augserve_grammar_compile_timeouts_total") >= 1
    assert srv.metric("augserve_grammar_cache_bytes") == blocked.masker.cache.bytes


def test_a_full_preparation_queue_is_a_503_and_the_rest_are_served(
    srv: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = BlockedCompile(srv, monkeypatch)
    prep = Preparer(PrepLimits(workers=1, queue=1))
    monkeypatch.setattr(srv.state, "preparer", prep)
    schema = {"type": "object", "properties": {"queued": {"type": "integer"}}}
    fmt = _schema_format(schema)
    first, out1 = _in_thread(lambda: _chat(srv, response_format=fmt, timeout=120))
    try:
        assert blocked.started.wait(60)  # the worker is busy with the first
        second, out2 = _in_thread(lambda: _chat(srv, timeout=120))  # queued
        for _ in range(600):
            if prep.pool.pending == 2:
                break
            blocked.release.wait(0.05)
        assert prep.pool.pending == 2
        third = _chat(srv)
        assert third.status_code == 503 and third.json()["error"]["code"] == "server_busy"
        assert _health(srv) == 200
    finally:
        blocked.release.set()
    first.join(120)
    second.join(120)
    assert out1[0].status_code == 200 and out2[0].status_code == 200


def test_preparation_threads_never_hold_up_the_exit(srv: LiveServer) -> None:
    """SIGTERM works while a compile runs: its thread is a daemon, so the process
    exits when the server has drained, whatever the compile does."""
    assert _chat(srv, response_format={"type": "json_object"}).status_code == 200
    names = ("augserve-prep", "augserve-grammar")
    threads = [t for t in threading.enumerate() if t.name.startswith(names)]
    assert {t.name.rsplit("-", 1)[0] for t in threads} == set(names)
    assert all(t.daemon for t in threads)


def test_a_large_body_is_parsed_off_the_event_loop(
    srv: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Walking a 2.5 MB body's values took 250-500 ms on the loop; now a preparation
    thread parses it (here held on an Event) while /health answers."""
    from augserve.server import strict_json

    started, release = threading.Event(), threading.Event()
    real = strict_json.parse_json_body

    def parse(body: bytes, *counts: Any) -> Any:
        if len(body) > 64 * 1024:  # strict_json.INLINE_BYTES
            started.set()
            assert release.wait(120)
        return real(body, *counts)

    monkeypatch.setattr(strict_json, "parse_json_body", parse)
    text = "word " * 40_000  # a 200 KB message
    t, out = _in_thread(lambda: _chat(srv, messages=[{"role": "user", "content": text}]))
    try:
        assert started.wait(60), "the body was never parsed"
        assert _health(srv) == 200 and not out
    finally:
        release.set()
    t.join(120)
    assert out and out[0].status_code in (200, 400), out  # served (or over the context)
