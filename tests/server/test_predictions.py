"""What the server predicts with no --predictor, --profile or plan (issue 24): the
call time of a tool it has run a few times, and a latency model fitted at its first
start and reused from the cache at the next."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest
from conftest import MODEL, call_text, start_server


def _chat(url: str, seed: int, out: dict[int, dict]) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "seed": seed,
            "max_tokens": 200, "server_tools": ["slow_add"]}  # fmt: skip
    out[seed] = httpx.post(url + "/v1/chat/completions", json=body, timeout=60).json()


def test_tool_prediction_and_fitted_then_cached_latency(
    chat_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tools = tmp_path / "tools.json"
    slow = {"name": "slow_add", "python": "augserve_test_tools:add_slowly", "timeout": 30}
    tools.write_text(json.dumps({"tools": [slow]}))
    srv = start_server(chat_model_dir, tools, fit_latency=True)
    try:
        assert srv.metric("augserve_latency_profile_info", source="fitted") == 1.0
        assert srv.state.engine.engine.predictor.name == "online"
        before = srv.metric("augserve_tool_predicted_seconds", tool="slow_add")
        for rnd in range(2):  # a few calls, three at a time
            out: dict[int, dict] = {}
            seeds = [10 * rnd + i for i in range(1, 4)]
            for s in seeds:
                srv.script(s, call_text("slow_add", a=s, b=1, ms=1500), "ok")
            threads = [threading.Thread(target=_chat, args=(srv.url, s, out)) for s in seeds]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert all(out[s]["choices"][0]["message"]["content"] == "ok" for s in seeds)
        predicted = srv.metric("augserve_tool_predicted_seconds", tool="slow_add")
        assert srv.metric("augserve_tool_predictor_observations", tool="slow_add") == 6
        assert 0.75 <= predicted <= 3.0, (before, predicted)
        assert srv.metric("augserve_tool_prediction_error_seconds", tool="slow_add") > 0
    finally:
        srv.stop()
    again = start_server(chat_model_dir, tools, fit_latency=True)
    try:
        assert again.metric("augserve_latency_profile_info", source="cached") == 1.0
        assert again.state.engine.engine.latency == srv.state.engine.engine.latency
    finally:
        again.stop()
