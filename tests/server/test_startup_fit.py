"""A server answers /health before its start-up latency fit has finished, serves with
the placeholder model meanwhile, and switches when the fit is done (issue 34)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from conftest import MODEL, start_server

from augserve.engine import background_fit


def test_health_answers_while_the_fit_runs_and_the_metric_follows_it(
    chat_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    entered, gate = threading.Event(), threading.Event()
    real = background_fit.time_one

    def blocked(runner, spec, blocks):  # the first shape waits for the test
        entered.set()
        assert gate.wait(120)
        return real(runner, spec, blocks)

    monkeypatch.setattr(background_fit, "time_one", blocked)
    srv = start_server(chat_model_dir, fit_latency=True, fit_in_background=True)
    try:
        assert entered.wait(60)  # the fit runs from start-up, before any request
        fit = srv.state.engine.engine.latency_fit
        assert fit is not None and not fit.done.is_set()
        health = httpx.get(srv.url + "/health", timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert srv.metric("augserve_latency_profile_info", source="default") == 1.0
        assert srv.metric("augserve_latency_profile_info", source="fitted") == 0.0
        gate.set()
        assert fit.done.wait(120)
        assert srv.metric("augserve_latency_profile_info", source="fitted") == 1.0
        assert srv.metric("augserve_latency_profile_info", source="default") == 0.0
        srv.script(1, "fine")
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "seed": 1}
        r = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "fine"
    finally:
        gate.set()
        srv.stop()
