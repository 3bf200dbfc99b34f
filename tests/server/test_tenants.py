"""Tenants (`server/tenancy.py`): with API keys set, every endpoint but /health,
/ping, /metrics and /version needs one; a key's prefix cache and paused sessions are
its own, so `cached_tokens` never reveals another tenant's prompt and one tenant
cannot continue (or end) another's session."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import MODEL, LiveServer, call_text, start_server

A, B = "key-tenant-a", "key-tenant-b"
SECRET = [3 + (11 * i) % 240 for i in range(160)]  # a 160-token "system prompt"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
        },
    }
]


@pytest.fixture(scope="module")
def srv(chat_model_dir: Path) -> Iterator[LiveServer]:
    s = start_server(chat_model_dir, api_key=[A, B])
    yield s
    s.stop()


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _cached(srv: LiveServer, key: str, prompt: list[int], **extra: Any) -> int:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 1, "temperature": 0.0, **extra}
    r = httpx.post(srv.url + "/v1/completions", json=body, headers=_auth(key), timeout=120)
    assert r.status_code == 200, r.text
    return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/tokenize", {"prompt": "hi"}),
        ("POST", "/detokenize", {"tokens": [5, 6]}),
        ("GET", "/docs", None),
        ("GET", "/openapi.json", None),
        ("GET", "/v1/models", None),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 1}),
    ],
)
def test_every_endpoint_but_the_open_ones_needs_a_key(
    srv: LiveServer, method: str, path: str, body: Any
) -> None:
    r = httpx.request(method, srv.url + path, json=body, timeout=30)
    assert r.status_code == 401, (path, r.status_code, r.text[:200])
    assert r.json()["error"]["code"] == "invalid_api_key"
    bad = httpx.request(method, srv.url + path, json=body, headers=_auth("nope"), timeout=30)
    assert bad.status_code == 401
    for key in (A, B):
        ok = httpx.request(method, srv.url + path, json=body, headers=_auth(key), timeout=60)
        assert ok.status_code == 200, (path, ok.text[:200])


def test_health_ping_metrics_and_version_stay_open(srv: LiveServer) -> None:
    for path in ("/health", "/ping", "/metrics", "/version"):
        assert httpx.get(srv.url + path, timeout=30).status_code == 200, path


def test_another_tenants_identical_prompt_finds_nothing_cached(srv: LiveServer) -> None:
    prompt = SECRET + [7, 8, 9]
    assert _cached(srv, A, prompt) == 0
    assert _cached(srv, B, prompt) == 0  # A's blocks are not B's
    assert _cached(srv, A, prompt + [10]) >= 144  # A's own: its full blocks
    assert _cached(srv, B, prompt + [11]) >= 144  # and B's own, now that B computed it


def test_a_request_cache_salt_scopes_it_further(srv: LiveServer) -> None:
    prompt = SECRET[::-1] + [4, 4]
    assert _cached(srv, A, prompt, cache_salt="alice") == 0
    assert _cached(srv, A, prompt, cache_salt="bob") == 0
    assert _cached(srv, A, prompt) == 0
    assert _cached(srv, A, prompt + [5], cache_salt="alice") >= 144


def _turn(srv: LiveServer, key: str, messages: list, seed: int, **extra: Any) -> dict:
    body = {"model": MODEL, "messages": messages, "tools": TOOLS, "seed": seed,
            "max_tokens": 100, **extra}  # fmt: skip
    r = httpx.post(srv.url + "/v1/chat/completions", json=body, headers=_auth(key), timeout=120)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _paused(srv: LiveServer) -> float:
    text = httpx.get(srv.url + "/metrics", timeout=30).text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("augserve_num_sessions_paused ")]
    return float(line.split()[1])


@pytest.mark.parametrize("session_id", [None, "agent-7"])
def test_another_tenant_cannot_continue_a_session(srv: LiveServer, session_id: str | None) -> None:
    seed = 4100 if session_id is None else 4200
    extra = {"session_id": session_id} if session_id else {}
    user = [  # the system message first: no tenant has this prompt's start cached
        {"role": "system", "content": f"{seed}: a shop's assistant."},
        {"role": "user", "content": f"Where is my order number {seed}? " * 6},
    ]
    srv.script(seed, "Let me look. ", call_text("lookup_order", id=seed))
    before = _paused(srv)
    first = _turn(srv, A, user, seed, **extra)
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    assert _paused(srv) == before + 1
    (tc,) = first["choices"][0]["message"]["tool_calls"]
    history = [
        *user,
        {"role": "assistant", "content": "Let me look. ", "tool_calls": [tc]},
        {"role": "tool", "tool_call_id": tc["id"], "content": json.dumps({"status": "shipped"})},
    ]
    srv.script(seed + 1, "Not yours.")
    other = _turn(srv, B, history, seed + 1, **extra)
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # no KV of A's
    assert _paused(srv) == before + 1  # A's session neither continued nor ended
    srv.script(seed + 2, "It has shipped.")
    mine = _turn(srv, A, history, seed + 2, **extra)
    assert mine["choices"][0]["message"]["content"] == "It has shipped."
    assert _paused(srv) == before  # continued by its own tenant
    usage1 = first["usage"]
    cached = mine["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == usage1["prompt_tokens"] + usage1["completion_tokens"] - 1
