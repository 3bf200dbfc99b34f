"""Fuzzing the HTTP API against the server's own OpenAPI schema (schemathesis, bounded:
a fixed number of valid and invalid examples, derandomized). No input gets a 5xx."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from conftest import MODEL, LiveServer, start_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from augserve.server.state import ServerLimits

EXAMPLES = 100


@pytest.fixture(scope="module")
def srv(chat_model_dir: Path) -> Iterator[LiveServer]:
    s = start_server(chat_model_dir, limits=ServerLimits(max_tokens=24), max_model_len=1024)
    yield s
    s.stop()


def test_no_input_gets_a_server_error(srv: LiveServer) -> None:
    schema = schemathesis.openapi.from_url(srv.url + "/openapi.json")
    cases = st.one_of(
        schema.as_strategy(generation_mode=GenerationMode.POSITIVE),
        schema.as_strategy(generation_mode=GenerationMode.NEGATIVE),
    )
    seen: dict[int, int] = {}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases, our_model=st.booleans())
    def fuzz(case: schemathesis.Case, our_model: bool) -> None:
        if our_model and isinstance(case.body, dict) and "model" in case.body:
            case.body["model"] = MODEL  # reach the engine, not just the 404 for the model
        resp = case.call(base_url=srv.url, timeout=60)
        seen[resp.status_code] = seen.get(resp.status_code, 0) + 1
        assert resp.status_code < 500, (case.as_curl_command(), resp.status_code, resp.text)
        if resp.status_code >= 400:
            assert "error" in resp.json()  # OpenAI's error object, always

    fuzz()
    assert sum(seen.values()) >= EXAMPLES  # every example reached the server
    assert any(s < 300 for s in seen) and any(400 <= s < 500 for s in seen)
    srv.wait_idle(timeout=30)
