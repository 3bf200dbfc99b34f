"""`augserve_latency_pace` on /metrics: 1 when the server does not follow its engine's
pace, and the pace the engine read under `--pace-window` (docs/scheduler.md,
"Following the engine's pace")."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from conftest import MODEL, start_server

from augserve.core.pace import PaceConfig


def _chat(url: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "seed": 1}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "a b c d"


def test_the_pace_metric_is_one_when_off_and_the_engine_s_pace_when_followed(
    chat_model_dir: Path, tmp_path: Path
) -> None:
    srv = start_server(chat_model_dir)  # the placeholder profile, no pace
    try:
        srv.script(1, "a b c d")
        _chat(srv.url)
        assert srv.metric("augserve_latency_pace") == 1.0
    finally:
        srv.stop()
    # a profile a million times too fast: any machine, however loaded, reads the bound
    fast = srv.state.engine.engine.latency.to_dict()  # the placeholder's, then scaled
    for c in ("c0", "c_prefill", "c_attn", "c_decode", "c_ctx"):
        fast[c] *= 1e-6
    path = tmp_path / "fast.json"
    path.write_text(json.dumps(fast))
    srv = start_server(chat_model_dir, profile=str(path), pace_window=2)
    try:
        srv.script(1, "a b c d")
        _chat(srv.url)
        assert srv.metric("augserve_latency_pace") == PaceConfig().high
    finally:
        srv.stop()
