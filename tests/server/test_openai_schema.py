"""Conformance: our answers validated with `jsonschema` against OpenAI's published
OpenAPI description (the vendored subset in `schemas/openai_subset.json`: chat
completions, chunks, completions, models and errors)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import MODEL, LiveServer, call_text
from jsonschema import Draft202012Validator

DOC = json.loads((Path(__file__).parent / "schemas" / "openai_subset.json").read_text())
USER = [{"role": "user", "content": "hi"}]


def check(name: str, body: Any) -> None:
    schema = {**DOC, "$ref": f"#/$defs/{name}"}
    errors = sorted(Draft202012Validator(schema).iter_errors(body), key=str)
    assert not errors, f"{name}: " + "; ".join(
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:5]
    )


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def stream(http: httpx.Client, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with http.stream("POST", path, json={**body, "stream": True}) as r:
        lines = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


def test_the_vendored_schema_names_its_source() -> None:
    assert "openai/openai-openapi" in DOC["$comment"] and "info.version" in DOC["$comment"]
    Draft202012Validator.check_schema({**DOC, "$ref": "#/$defs/CreateChatCompletionResponse"})


def test_chat_completion(server: LiveServer, http: httpx.Client) -> None:
    body = http.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": USER, "max_tokens": 4}
    )
    check("CreateChatCompletionResponse", body.json())


def test_chat_completion_with_a_tool_call(server: LiveServer, http: httpx.Client) -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    server.script(4401, call_text("lookup", id=1))
    r = http.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": USER, "tools": [tool], "seed": 4401, "max_tokens": 60},
    ).json()
    assert r["choices"][0]["finish_reason"] == "tool_calls"
    check("CreateChatCompletionResponse", r)


def test_chat_chunks(server: LiveServer, http: httpx.Client) -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    server.script(4402, "Let me see. ", call_text("lookup", id=2))
    body = {
        "model": MODEL,
        "messages": USER,
        "tools": [tool],
        "seed": 4402,
        "max_tokens": 60,
        "stream_options": {"include_usage": True},
    }
    chunks = stream(http, "/v1/chat/completions", body)
    assert chunks[-1]["choices"] == [] and len(chunks) >= 3
    for c in chunks:
        check("CreateChatCompletionStreamResponse", c)


def test_completion(http: httpx.Client) -> None:
    r = http.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 3, "n": 2})
    check("CreateCompletionResponse", r.json())


def test_models(http: httpx.Client) -> None:
    check("ListModelsResponse", http.get("/v1/models").json())
    check("Model", http.get(f"/v1/models/{MODEL}").json())


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/chat/completions", {"model": MODEL, "messages": []}),
        ("POST", "/v1/chat/completions", {"model": "gpt-9", "messages": USER}),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": True}),
        ("GET", "/v1/models/gpt-9", None),
        ("GET", "/v1/nothing", None),
    ],
)
def test_errors(http: httpx.Client, method: str, path: str, body: Any) -> None:
    r = http.request(method, path, json=body)
    assert 400 <= r.status_code < 500
    check("ErrorResponse", r.json())
