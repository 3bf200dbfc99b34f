"""The prefix cache through the HTTP API: `usage.prompt_tokens_details.cached_tokens`,
the hit-rate metrics, and a client-side tool round trip that reuses the first turn."""

from __future__ import annotations

import json
import time

import httpx
from conftest import MODEL, LiveServer, call_text

PREFIX = [3 + (7 * i) % 250 for i in range(1000)]  # a 1,000-token prefix


def _complete(server: LiveServer, prompt: list[int]) -> dict:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 4, "temperature": 0.0}
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["usage"]


def test_a_repeated_1000_token_prefix_reports_its_cached_tokens(server: LiveServer) -> None:
    hits = server.metric("augserve_prefix_cache_hits_total")
    first = _complete(server, PREFIX + [5, 6, 7])
    second = _complete(server, PREFIX + [9, 10, 11, 12])
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert second["prompt_tokens"] == 1004 and cached >= 960
    # the second prefill computed only what the cache did not hold
    assert second["prompt_tokens"] - cached <= 44
    assert server.metric("augserve_prefix_cache_hits_total") - hits >= 960
    assert 0.0 < server.metric("augserve_prefix_cache_hit_rate") <= 1.0
    server.wait_idle()  # cached free blocks count as free: nothing is held


def test_a_client_side_tool_round_trip_reuses_the_first_turn(server: LiveServer) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup_order",
                "description": "Find an order by its number and report its status",
                "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
            },
        }
    ]
    user = [{"role": "user", "content": "Where is my order number 7? " * 8}]
    server.script(2501, "Let me look. ", call_text("lookup_order", id=7))
    body = {"model": MODEL, "messages": user, "tools": tools, "seed": 2501, "max_tokens": 200}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120)
    first = r.json()
    assert first["choices"][0]["finish_reason"] == "tool_calls", first
    (tc,) = first["choices"][0]["message"]["tool_calls"]
    time.sleep(3.0)  # the client runs its tool
    history = [
        *user,
        {"role": "assistant", "content": "Let me look. ", "tool_calls": [tc]},
        {"role": "tool", "tool_call_id": tc["id"], "content": json.dumps({"status": "shipped"})},
    ]
    server.script(2502, "It has shipped.")
    body = {"model": MODEL, "messages": history, "tools": tools, "seed": 2502, "max_tokens": 50}
    second = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120).json()
    assert second["choices"][0]["message"]["content"] == "It has shipped."
    reused = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert reused >= 0.8 * first["usage"]["prompt_tokens"], (reused, first["usage"])
