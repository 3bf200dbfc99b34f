"""The surface clients expect (issue 27, and issue 26's strict validation): streaming as
OpenAI and vLLM send it, vLLM's small endpoints, and strict request types with errors
that name the problem."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import MODEL, LiveServer
from openai import OpenAI

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def events(http: httpx.Client, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    with http.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


def chat(**kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": USER, "max_tokens": 4, **kw}


# --- streaming ---------------------------------------------------------------------------
def test_first_chunk_carries_the_role_and_the_first_token(server: LiveServer, http: Any) -> None:
    """The role chunk goes out with the first output (after prefill), so a client's time
    to first chunk is the TTFT; before, it went out before prefill with no content."""
    server.script(4101, "Hello", " world")
    chunks = events(http, "/v1/chat/completions", chat(seed=4101, max_tokens=8))
    first = chunks[0]["choices"][0]["delta"]
    first_token = server.tokenizer.decode(
        server.tokenizer.encode("Hello", add_special_tokens=False)[:1]
    )
    assert first["role"] == "assistant" and first["refusal"] is None
    assert first["content"] == first_token
    roles = [c["choices"][0]["delta"].get("role") for c in chunks]
    assert roles.count("assistant") == 1  # the role only in the first chunk
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "Hello world"


def test_usage_chunk_only_when_asked(server: LiveServer, http: httpx.Client) -> None:
    for path, body in (
        ("/v1/chat/completions", chat()),
        ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 3}),
    ):
        plain = events(http, path, body)
        assert plain and all(c["choices"] for c in plain)  # choices[0] on every chunk
        assert not any("usage" in c for c in plain)
        asked = events(http, path, {**body, "stream_options": {"include_usage": True}})
        assert asked[-1]["choices"] == [] and asked[-1]["usage"]["completion_tokens"] >= 1
        assert all(c["choices"] for c in asked[:-1])
        off = events(http, path, {**body, "stream_options": {"include_usage": False}})
        assert all(c["choices"] for c in off)


def test_openai_snippet_reads_choices_zero_on_every_chunk(server: LiveServer) -> None:
    client = OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    stream = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
    assert isinstance(text, str)


def test_message_has_refusal_null(http: httpx.Client) -> None:
    r = http.post("/v1/chat/completions", json=chat())
    msg = r.json()["choices"][0]["message"]
    assert "refusal" in msg and msg["refusal"] is None


# --- endpoints ---------------------------------------------------------------------------
def test_get_one_model(server: LiveServer, http: httpx.Client) -> None:
    card = http.get(f"/v1/models/{MODEL}").json()
    assert card["id"] == MODEL and card["object"] == "model"
    assert card["max_model_len"] == server.state.max_model_len
    client = OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    assert client.models.retrieve(MODEL).id == MODEL
    r = http.get("/v1/models/gpt-9")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_tokenize_and_detokenize_as_vllm(server: LiveServer, http: httpx.Client) -> None:
    tok = server.tokenizer
    r = http.post("/tokenize", json={"model": MODEL, "prompt": "hello world"}).json()
    assert r["tokens"] == tok.encode("hello world", add_special_tokens=True)
    assert r["count"] == len(r["tokens"]) and r["max_model_len"] == server.state.max_model_len
    assert r["token_strs"] is None
    r2 = http.post("/tokenize", json={"prompt": "hello", "return_token_strs": True}).json()
    assert "".join(r2["token_strs"]).endswith("hello")
    chat_r = http.post("/tokenize", json={"model": MODEL, "messages": USER}).json()
    prompt = server.state.template.render(USER, tools=None)  # no server tool asked for
    assert chat_r["tokens"] == tok.encode(prompt, add_special_tokens=False)
    body = {"model": MODEL, "messages": USER, "server_tools": ["add"]}
    asked = http.post("/tokenize", json=body).json()
    prompt = server.state.template.render(
        USER, tools=server.state.registry.definitions(frozenset({"add"}))
    )
    assert asked["tokens"] == tok.encode(prompt, add_special_tokens=False)
    ids = tok.encode("hello world", add_special_tokens=False)
    assert http.post("/detokenize", json={"tokens": ids}).json() == {"prompt": "hello world"}
    bad = http.post("/detokenize", json={"tokens": [10**7]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    both = http.post("/tokenize", json={"prompt": "x", "messages": USER})
    assert both.status_code == 400


def test_version_and_ping(server: LiveServer, http: httpx.Client) -> None:
    from augserve import __version__

    assert http.get("/version").json() == {"version": __version__}
    assert http.get("/ping").status_code == 200
    assert http.post("/ping").status_code == 200


# --- strict validation (issue 26) ---------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "param"),
    [
        (chat(stream="yes"), "stream"),
        (chat(max_tokens=True), "max_tokens"),
        (chat(temperature="0.5"), "temperature"),
        (chat(n=1.0), "n"),
        (chat(messages=[{"role": "user"}]), "messages.0"),
        (chat(messages=[{"role": "user", "content": None}]), "messages.0"),
        (chat(messages=[{"role": "assistant"}]), "messages.0"),
        (chat(stream_options={"include_usage": "yes"}), "stream_options.include_usage"),
        ({"model": MODEL, "prompt": "x", "echo": 1}, "echo"),
    ],
)
def test_types_are_strict(http: httpx.Client, body: dict[str, Any], param: str) -> None:
    path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
    r = http.post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param, err
    assert param in err["message"]


def test_ints_are_still_floats(http: httpx.Client) -> None:
    assert http.post("/v1/chat/completions", json=chat(temperature=0, top_p=1)).status_code == 200


def _post_raw(http: httpx.Client, path: str, body: bytes) -> httpx.Response:
    return http.post(path, content=body, headers={"content-type": "application/json"})


def test_invalid_utf8_is_named(http: httpx.Client) -> None:
    body = b'{"model": "test-model", "messages": [{"role": "user", "content": "a\xff"}]}'
    r = _post_raw(http, "/v1/chat/completions", body)
    assert r.status_code == 400
    err = r.json()["error"]
    assert "not valid UTF-8" in err["message"] and "0xff" in err["message"], err
    assert set(err) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("depth", [200, 100_000])
def test_deep_nesting_is_named(http: httpx.Client, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    body = f'{{"model": "test-model", "prompt": "x", "user": {nested}}}'.encode()
    r = _post_raw(http, "/v1/completions", body)
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    assert "deeper than the limit of 64" in msg, msg
