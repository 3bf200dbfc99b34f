"""The server under paused tool calls: they never hoard the KV pool (issue 24).

Twelve chat requests call a server tool that sleeps CALL_S seconds (default 30;
`AUGSERVE_HOARD_CALL_S` scales it, keeping the claim's structure) and, kept on
device, fill a small KV pool (12 x 39 blocks of 470, with host room for two).
A thirteenth, plain request must finish in under 8 s, before any call returns;
then all twelve finish with their tool's result. With the server's old default
(the oracle, which predicts no call without a scripted plan) they kept their KV
for the whole call and the new request waited for them.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import httpx
from conftest import MODEL, call_text, start_server

CALL_S = float(os.environ.get("AUGSERVE_HOARD_CALL_S", "30"))
N = 12
BLOCKS_PER_PAUSED = 39  # a request's prompt with the one tool's schema, and its call


def _chat(url: str, seed: int, out: dict[int, dict]) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "seed": seed,
        "max_tokens": 200,
        "tool_trace": True,
        "server_tools": ["slow_add"],
    }
    out[seed] = httpx.post(url + "/v1/chat/completions", json=body, timeout=4 * CALL_S).json()


def test_a_new_request_is_not_blocked_by_requests_paused_in_long_calls(
    chat_model_dir: Path, tmp_path: Path
) -> None:
    tools = tmp_path / "tools.json"
    slow = {"name": "slow_add", "python": "augserve_test_tools:add_slowly", "timeout": 4 * CALL_S}
    tools.write_text(json.dumps({"tools": [slow]}))
    pool = N * BLOCKS_PER_PAUSED + 2
    srv = start_server(chat_model_dir, tools, num_device_blocks=pool, num_host_blocks=80)
    try:
        for i in range(1, N + 1):
            srv.script(i, call_text("slow_add", a=i, b=100, ms=int(CALL_S * 1000)), "ok")
        results: dict[int, dict] = {}
        threads = [
            threading.Thread(target=_chat, args=(srv.url, i, results)) for i in range(1, N + 1)
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + CALL_S
        while srv.metric("augserve_num_requests", state="paused") < N:
            assert time.monotonic() < deadline, "the twelve never were all in their calls"
            time.sleep(0.05)
        srv.script(99, "hello there")
        t0 = time.monotonic()
        plain: dict[int, dict] = {}
        _chat(srv.url, 99, plain)
        took = time.monotonic() - t0
        still_paused = srv.metric("augserve_num_requests", state="paused")
        assert plain[99]["choices"][0]["message"]["content"] == "hello there"
        assert took < 8.0, f"the new request took {took:.1f} s behind paused requests"
        assert still_paused == N  # it finished before any call came back
        for t in threads:
            t.join(timeout=4 * CALL_S)
        for i in range(1, N + 1):
            choice = results[i]["choices"][0]
            assert choice["finish_reason"] == "stop" and choice["message"]["content"] == "ok"
            (step,) = choice["tool_trace"]
            assert step["name"] == "slow_add" and step["result"] == str(i + 100)
        srv.wait_idle()
    finally:
        srv.stop()
