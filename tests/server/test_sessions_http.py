"""Client sessions through the HTTP API: a "tool_calls" turn stays paused
(`augserve_num_sessions_paused`), and the client's next turn, matched by the
conversation or by its session id (body or X-Session-Id header), continues it."""

from __future__ import annotations

import json

import httpx
from conftest import MODEL, LiveServer, call_text

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Find an order by its number and report its status",
            "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
        },
    }
]


def _turn(server: LiveServer, messages: list, seed: int, **extra) -> tuple[dict, dict]:
    headers = extra.pop("headers", {})
    body = {"model": MODEL, "messages": messages, "tools": TOOLS, "seed": seed,
            "max_tokens": 100, **extra}  # fmt: skip
    r = httpx.post(server.url + "/v1/chat/completions", json=body, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    return out["choices"][0], out["usage"]


def _round_trip(server: LiveServer, seed: int, first: dict, second: dict) -> tuple[dict, dict]:
    user = [{"role": "user", "content": f"Where is my order number {seed}? " * 6}]
    server.script(seed, "Let me look. ", call_text("lookup_order", id=seed))
    before = server.metric("augserve_num_sessions_paused")
    choice, usage1 = _turn(server, user, seed, **first)
    assert choice["finish_reason"] == "tool_calls"
    assert server.metric("augserve_num_sessions_paused") == before + 1  # kept, paused
    (tc,) = choice["message"]["tool_calls"]
    history = [
        *user,
        {"role": "assistant", "content": "Let me look. ", "tool_calls": [tc]},
        {"role": "tool", "tool_call_id": tc["id"], "content": json.dumps({"status": "shipped"})},
    ]
    server.script(seed + 1, "It has shipped.")
    choice2, usage2 = _turn(server, history, seed + 1, **second)
    assert choice2["message"]["content"] == "It has shipped."
    assert server.metric("augserve_num_sessions_paused") == before  # continued
    return usage1, usage2


def test_a_tool_round_trip_continues_the_paused_session(server: LiveServer) -> None:
    usage1, usage2 = _round_trip(server, 3101, {}, {})
    cached = usage2["prompt_tokens_details"]["cached_tokens"]
    # the template writes the call back as the model wrote it, so the session's whole
    # context is taken over: every token but the last sampled one (the prefix cache
    # alone would stop at the last full block)
    assert cached == usage1["prompt_tokens"] + usage1["completion_tokens"] - 1
    server.wait_idle()


def test_a_session_id_in_the_body_and_the_header_continues_it(server: LiveServer) -> None:
    sid = {"session_id": "agent-42"}
    usage1, usage2 = _round_trip(server, 3201, sid, {"headers": {"X-Session-Id": "agent-42"}})
    cached = usage2["prompt_tokens_details"]["cached_tokens"]
    assert cached == usage1["prompt_tokens"] + usage1["completion_tokens"] - 1


def test_a_bad_session_id_is_a_400_naming_the_field(server: LiveServer) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "session_id": ""}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 400 and "session_id" in r.text
