"""Constrained decoding and sampler parameters through the HTTP API, on a random-weight
model with no scripted tokens (unless a test says so): forced tool calls are schema-valid
and run (server tool) or come back (client tool), response_format holds in chat and
completions, bad schemas and bad parameters are 400s naming the field, and every
sampler parameter changes what it should."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from conftest import MODEL, LiveServer, call_text, start_server

USER = [{"role": "user", "content": "Help me."}]
NUM = {"type": "integer", "minimum": 0, "maximum": 999}
CLIENT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "parameters": {"type": "object", "properties": {"id": NUM}, "required": ["id"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "set_flag",
            "parameters": {
                "type": "object",
                "properties": {"on": {"type": "boolean"}, "unit": {"enum": ["C", "F"]}},
                "required": ["on", "unit"],
            },
        },
    },
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in CLIENT_TOOLS}
ANSWER = {
    "type": "object",
    "properties": {"score": NUM, "ok": {"type": "boolean"}, "tag": {"enum": ["a", "b"]}},
    "required": ["score", "ok", "tag"],
}


@pytest.fixture(scope="module")
def bare(chat_model_dir: Path) -> Iterator[LiveServer]:
    """A server without server-side tools (so "required" picks among client tools)."""
    srv = start_server(chat_model_dir)
    yield srv
    srv.stop()


def post(srv: LiveServer, path: str, **body: Any) -> httpx.Response:
    body.setdefault("model", MODEL)
    return httpx.post(srv.url + path, json=body, timeout=120)


def chat(srv: LiveServer, **body: Any) -> dict[str, Any]:
    body.setdefault("messages", USER)
    r = post(srv, "/v1/chat/completions", **body)
    assert r.status_code == 200, r.text
    return r.json()


def test_named_server_tool_runs_with_schema_valid_arguments(server: LiveServer) -> None:
    """Unscripted random weights: the grammar writes `add`'s call, the server runs it
    and the request resumes; no markup in content."""
    choice = {"type": "function", "function": {"name": "add"}}
    for seed in (1, 2):
        out = chat(
            server,
            tool_choice=choice,
            seed=seed,
            max_tokens=300,
            temperature=1.0,
            tool_trace=True,
            server_tools=["add"],
        )["choices"][0]
        trace = out["tool_trace"]
        assert trace and trace[0]["name"] == "add" and trace[0]["error"] is None, trace
        args = trace[0]["arguments"]
        assert isinstance(args["a"], int) and isinstance(args["b"], int)
        assert trace[0]["result"] == str(args["a"] + args["b"])
        assert "<tool_call>" not in (out["message"]["content"] or "")


def test_required_picks_one_client_tool_valid_against_its_schema(bare: LiveServer) -> None:
    names = set()
    for seed in range(4):
        out = chat(
            bare,
            tools=CLIENT_TOOLS,
            tool_choice="required",
            seed=seed,
            max_tokens=120,
            temperature=1.0,
        )["choices"][0]
        assert out["finish_reason"] == "tool_calls", out
        (tc,) = out["message"]["tool_calls"]
        name = tc["function"]["name"]
        jsonschema.validate(json.loads(tc["function"]["arguments"]), SCHEMAS[name])
        assert not out["message"]["content"]
        names.add(name)
    assert names <= set(SCHEMAS)


def test_required_streams_a_call_and_no_content(bare: LiveServer) -> None:
    body = {
        "model": MODEL,
        "messages": USER,
        "tools": CLIENT_TOOLS,
        "seed": 7,
        "tool_choice": {"type": "function", "function": {"name": "set_flag"}},
        "max_tokens": 120,
        "stream": True,
    }
    with httpx.stream("POST", bare.url + "/v1/chat/completions", json=body, timeout=120) as r:
        events = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: {")]
    deltas = [c["choices"][0] for c in events if c["choices"]]
    assert "".join(d["delta"].get("content") or "" for d in deltas) == ""
    calls = [tc for d in deltas for tc in d["delta"].get("tool_calls") or []]
    assert [tc["function"]["name"] for tc in calls] == ["set_flag"]
    jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), SCHEMAS["set_flag"])
    assert deltas[-1]["finish_reason"] == "tool_calls"


def test_forced_call_cut_short_is_a_finish_reason_not_markup(bare: LiveServer) -> None:
    choice = {"type": "function", "function": {"name": "lookup_order"}}
    out = chat(bare, tools=CLIENT_TOOLS, tool_choice=choice, max_tokens=4, seed=3)["choices"][0]
    assert out["finish_reason"] == "length"
    assert not out["message"]["content"] and "tool_calls" not in out["message"]


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_response_format_json_schema_and_json_object(bare: LiveServer, endpoint: str) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER}}
    for seed in range(3):
        if endpoint == "chat":
            out = chat(bare, response_format=fmt, seed=seed, max_tokens=100, temperature=1.0)
            text = out["choices"][0]["message"]["content"]
        else:
            r = post(
                bare,
                "/v1/completions",
                prompt="Answer:",
                response_format=fmt,
                seed=seed,
                max_tokens=100,
                temperature=1.0,
            )
            assert r.status_code == 200, r.text
            text = r.json()["choices"][0]["text"]
        jsonschema.validate(json.loads(text), ANSWER)
    plain = chat(bare, seed=0, max_tokens=30, temperature=1.0)["choices"][0]["message"]["content"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(plain)  # the control: free text is not JSON
    obj = chat(bare, response_format={"type": "json_object"}, temperature=0.0, max_tokens=400)
    text = obj["choices"][0]["message"]["content"]
    assert text.startswith("{")
    if obj["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(text), dict)


def test_response_format_after_a_forced_server_call(server: LiveServer) -> None:
    """The forced call's grammar ends with the call; response_format governs the rest."""
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER}}
    out = chat(
        server,
        tool_choice={"type": "function", "function": {"name": "add"}},
        response_format=fmt,
        seed=5,
        max_tokens=300,
        tool_trace=True,
        server_tools=["add"],
    )["choices"][0]
    assert out["tool_trace"][0]["name"] == "add"
    jsonschema.validate(json.loads(out["message"]["content"]), ANSWER)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_bad_schema_is_a_400_naming_it(bare: LiveServer, path: str) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objectx"}}}
    body = {"messages": USER} if "chat" in path else {"prompt": "x"}
    r = post(bare, path, response_format=fmt, **body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "response_format.json_schema.schema" and "objectx" in err["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"min_tokens": 6, "max_tokens": 4}, "min_tokens"),
        ({"best_of": 2}, "best_of"),
        ({"logit_bias": {"abc": 1}}, "logit_bias"),
        ({"logit_bias": {"99999": 1}}, "logit_bias"),
        ({"logit_bias": {"5": 500}}, "logit_bias"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"min_p": 2}, "min_p"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 50}, "top_logprobs"),
    ],
)
def test_bad_sampler_parameters_are_400s_naming_them(
    bare: LiveServer, body: dict[str, Any], param: str
) -> None:
    r = post(bare, "/v1/chat/completions", messages=USER, **body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_min_tokens_over_max_tokens_in_completions(bare: LiveServer) -> None:
    r = post(bare, "/v1/completions", prompt="Hi", min_tokens=6, max_tokens=4)
    assert r.status_code == 400 and r.json()["error"]["param"] == "min_tokens"


def test_logit_bias_and_penalties_change_greedy_output(bare: LiveServer) -> None:
    tok = bare.tokenizer
    target = tok.encode(" Paris", add_special_tokens=False)[0]
    base = {"temperature": 0.0, "max_tokens": 12, "ignore_eos": True}
    forced = chat(bare, logit_bias={str(target): 100}, **base)["choices"][0]["message"]["content"]
    assert forced == tok.decode([target] * 12)

    def ids(**knob: Any) -> list[int]:
        body = {"temperature": 0.0, **knob}
        r = post(
            bare,
            "/v1/completions",
            prompt="the the the",
            max_tokens=32,
            ignore_eos=True,
            return_token_ids=True,
            **body,
        )
        assert r.status_code == 200, r.text
        return list(r.json()["choices"][0]["token_ids"])

    bias = {"logit_bias": {str(target): 8.0}}  # a token the model then repeats...
    plain = ids(**bias)
    assert plain.count(target) >= 28
    for knob in ({"frequency_penalty": 2.0}, {"repetition_penalty": 5.0}):
        assert ids(**bias, **knob).count(target) < plain.count(target) / 2, knob  # ...less
    drops = []
    for b in (1.5, 2.5, 3.5):  # presence subtracts 2 once: it wins where the bias is small
        weak = {"logit_bias": {str(target): b}}
        drops.append(ids(**weak, presence_penalty=2.0).count(target) < ids(**weak).count(target))
    assert any(drops)
    plain = ids()
    first = plain[0]  # min_p=1 keeps only the top token: sampling becomes greedy
    assert all(ids(min_p=1.0, temperature=1.0, seed=s)[0] == first for s in range(3))


def test_chat_logprobs_shape_and_values(bare: LiveServer) -> None:
    out = chat(bare, logprobs=True, top_logprobs=3, temperature=0.0, max_tokens=6, ignore_eos=True)[
        "choices"
    ][0]
    content = out["logprobs"]["content"]
    assert len(content) == 6
    for item in content:
        tops = item["top_logprobs"]
        assert len(tops) == 3 and item["logprob"] <= 0.0
        assert tops[0]["logprob"] >= tops[1]["logprob"] >= tops[2]["logprob"]
        assert item["logprob"] == pytest.approx(tops[0]["logprob"])  # greedy: the top one
        assert item["bytes"] == list(item["token"].encode())
        assert sum(math.exp(t["logprob"]) for t in tops) <= 1.0 + 1e-6
    assert "".join(i["token"] for i in content) == out["message"]["content"]
    none = chat(bare, max_tokens=2)["choices"][0]
    assert none["logprobs"] is None


def test_completions_logprobs_shape(bare: LiveServer) -> None:
    r = post(
        bare,
        "/v1/completions",
        prompt="Hello",
        logprobs=2,
        max_tokens=5,
        temperature=0.0,
        ignore_eos=True,
    )
    lp = r.json()["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 5
    assert all(len(t) <= 2 for t in lp["top_logprobs"])
    assert lp["text_offset"][0] == 0
    assert "".join(lp["tokens"]) == r.json()["choices"][0]["text"]


def test_parallel_tool_calls_governs_the_turns_client_calls(bare: LiveServer) -> None:
    two = call_text("lookup_order", id=1) + "\n" + call_text("set_flag", on=True, unit="C")
    for parallel, want in ((True, ["lookup_order", "set_flag"]), (False, ["lookup_order"])):
        bare.script(4242, two)
        out = chat(
            bare, tools=CLIENT_TOOLS, seed=4242, max_tokens=200, parallel_tool_calls=parallel
        )["choices"][0]
        assert out["finish_reason"] == "tool_calls"
        assert [tc["function"]["name"] for tc in out["message"]["tool_calls"]] == want
        assert not out["message"]["content"]


def test_tolerant_bare_json_call_runs_on_the_server(server: LiveServer) -> None:
    server.script(4343, json.dumps({"name": "add", "arguments": {"a": 2, "b": 3}}))
    out = chat(server, seed=4343, max_tokens=60, tool_trace=True, server_tools="all")["choices"][0]
    assert out["tool_trace"][0]["name"] == "add" and out["tool_trace"][0]["result"] == "5"
    assert '"name"' not in (out["message"]["content"] or "")
