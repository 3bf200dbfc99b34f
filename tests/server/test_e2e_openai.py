"""End to end with the official `openai` client against a live server on 127.0.0.1:
plain chat and streaming, a Python tool and an MCP tool run inside the engine (the
request pauses in the scheduler and resumes with the result), a client-side tool
round trip, n > 1, and the completions endpoint."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import augserve_test_tools as sample
import pytest
from conftest import MODEL, LiveServer, call_text, start_server, write_tools
from openai import OpenAI


@pytest.fixture(scope="module")
def mcp_server(
    chat_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    tools = write_tools(tmp_path_factory.mktemp("tools") / "tools.json", mcp=True)
    srv = start_server(chat_model_dir, tools, api_key="sk-test")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(mcp_server: LiveServer) -> OpenAI:
    return OpenAI(base_url=mcp_server.url + "/v1", api_key="sk-test", max_retries=0, timeout=60)


USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_models_and_health(mcp_server: LiveServer, client: OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL]
    import httpx

    health = httpx.get(mcp_server.url + "/health").json()
    assert health == {"status": "ok", "tool_servers": {"test": "up"}}


def test_plain_chat_and_streaming_agree(mcp_server: LiveServer, client: OpenAI) -> None:
    kw = {"model": MODEL, "messages": USER, "max_tokens": 12, "temperature": 0.0}
    full = client.chat.completions.create(**kw)
    choice = full.choices[0]
    assert choice.finish_reason in ("stop", "length") and choice.message.role == "assistant"
    tok = mcp_server.tokenizer
    prompt = mcp_server.state.template.render(USER, tools=None)  # server tools: only if asked
    assert full.usage.prompt_tokens == len(tok.encode(prompt, add_special_tokens=False))
    assert 1 <= full.usage.completion_tokens <= 12
    usage = {"include_usage": True}
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options=usage))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content  # greedy: the same answer both ways
    finals = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finals == [choice.finish_reason]
    assert (
        chunks[-1].choices == []
        and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    )


def test_python_tool_runs_while_the_request_is_paused(
    mcp_server: LiveServer, client: OpenAI
) -> None:
    mcp_server.script(101, call_text("slow_weather", seconds=1.0), "It is sunny.")
    seen_paused: list[bool] = []
    answered = threading.Event()

    def watch() -> None:  # polls until the answer came (the call sleeps a whole second)
        while not answered.is_set() and not seen_paused:
            if mcp_server.metric("augserve_num_requests", state="paused") == 1:
                seen_paused.append(True)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        resp = client.chat.completions.create(
            model=MODEL,
            messages=USER,
            seed=101,
            max_tokens=200,
            extra_body={"tool_trace": True, "server_tools": ["slow_weather"]},
        )
    finally:
        answered.set()
        watcher.join()
    choice = resp.choices[0]
    assert choice.message.content == "It is sunny." and choice.finish_reason == "stop"
    assert choice.message.tool_calls is None
    (step,) = choice.model_extra["tool_trace"]
    assert step["name"] == "slow_weather" and step["arguments"] == {"seconds": 1.0}
    assert step["result"] == "woke up" and step["error"] is None and step["duration"] >= 0.95
    assert seen_paused == [True]  # the request sat in the scheduler's paused state
    mcp_server.wait_idle()


def test_tool_result_reaches_the_model_context(mcp_server: LiveServer, client: OpenAI) -> None:
    before = len(sample.calls)
    mcp_server.script(102, "Checking. ", call_text("get_weather", city="Paris"), "Done.")
    resp = client.chat.completions.create(
        model=MODEL,
        messages=USER,
        seed=102,
        max_tokens=200,
        extra_body={"tool_trace": True, "server_tools": ["get_weather"]},
    )
    assert sample.calls[before:] == [{"city": "Paris", "unit": "C"}]
    choice = resp.choices[0]
    assert choice.message.content == "Checking. Done."
    (step,) = choice.model_extra["tool_trace"]
    assert json.loads(step["result"]) == {"city": "Paris", "temp": 21, "unit": "C"}
    # tokens generated = the call + both texts; the tool result is context, not completion
    tok = mcp_server.tokenizer
    generated = "Checking. " + call_text("get_weather", city="Paris") + "Done."
    assert resp.usage.completion_tokens == len(tok.encode(generated, add_special_tokens=False)) + 1
    assert mcp_server.metric("augserve_tool_calls_total", tool="get_weather") >= 1


def test_mcp_tool_over_stdio(mcp_server: LiveServer, client: OpenAI) -> None:
    names = {t["function"]["name"] for t in mcp_server.state.registry.definitions()}
    assert {"mcp_add", "mcp_shout", "mcp_fail"} <= names
    mcp_server.script(103, call_text("mcp_add", a=2, b=3), call_text("mcp_shout", text="ok"), "5")
    resp = client.chat.completions.create(
        model=MODEL,
        messages=USER,
        seed=103,
        max_tokens=300,
        extra_body={"tool_trace": True, "server_tools": ["mcp_add", "mcp_shout"]},
    )
    choice = resp.choices[0]
    assert choice.message.content == "5" and choice.finish_reason == "stop"
    trace = choice.model_extra["tool_trace"]
    assert [(t["name"], t["result"], t["error"]) for t in trace] == [
        ("mcp_add", "5", None),
        ("mcp_shout", "OK!", None),
    ]


def test_client_side_tool_round_trip(mcp_server: LiveServer, client: OpenAI) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup_order",
                "description": "Find an order",
                "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}},
            },
        }
    ]
    mcp_server.script(104, "Let me look. ", call_text("lookup_order", id=7), "never reached")
    first = client.chat.completions.create(
        model=MODEL, messages=USER, tools=tools, seed=104, max_tokens=200
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (tc,) = choice.message.tool_calls
    assert tc.type == "function" and tc.function.name == "lookup_order"
    assert json.loads(tc.function.arguments) == {"id": 7} and tc.id.startswith("call_")
    assert choice.message.content == "Let me look. "
    mcp_server.wait_idle()
    history = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [tc.model_dump()]},
        {"role": "tool", "tool_call_id": tc.id, "content": '{"status": "shipped"}'},
    ]
    mcp_server.script(105, "Order 7 has shipped.")
    second = client.chat.completions.create(
        model=MODEL, messages=history, tools=tools, seed=105, max_tokens=50
    )
    assert second.choices[0].message.content == "Order 7 has shipped."
    assert second.choices[0].finish_reason == "stop"
    # the template rendered the tool message into the prompt
    state = mcp_server.state
    prompt = state.template.render(history, tools=tools)  # no server tool was asked for
    assert '<tool_response>\n{"status": "shipped"}\n</tool_response>' in prompt
    ids = mcp_server.tokenizer.encode(prompt, add_special_tokens=False)
    assert second.usage.prompt_tokens == len(ids)


def test_tool_choice_named_server_tool_is_forced(mcp_server: LiveServer, client: OpenAI) -> None:
    """A named tool_choice constrains the model's first tokens to that call (the
    grammar writes the opening); the call runs and the turn goes on in free text."""
    before = len(sample.calls)
    mcp_server.script(110, call_text("get_weather", city="Rome"), "Sunny in Rome.")
    choice_arg = {"type": "function", "function": {"name": "get_weather"}}
    resp = client.chat.completions.create(
        model=MODEL,
        messages=USER,
        seed=110,
        max_tokens=200,
        tool_choice=choice_arg,
        extra_body={"server_tools": ["get_weather"]},
    )
    assert sample.calls[before:] == [{"city": "Rome", "unit": "C"}]
    assert resp.choices[0].message.content == "Sunny in Rome."
    state = mcp_server.state
    offered = state.registry.definitions(frozenset({"get_weather"}))
    prompt = state.template.render(USER, tools=offered)
    ids = mcp_server.tokenizer.encode(prompt, add_special_tokens=False)
    assert resp.usage.prompt_tokens == len(ids)
    mcp_server.wait_idle()


def test_tool_choice_required_client_tool(mcp_server: LiveServer, client: OpenAI) -> None:
    tools = [
        {
            "type": "function",
            "function": {"name": "lookup_order", "parameters": {"type": "object"}},
        }
    ]
    body = "<tool_call>\n" + json.dumps({"name": "lookup_order", "arguments": {"id": 9}})
    mcp_server.script(111, body + "\n</tool_call>", "never reached")
    for stream in (False, True):
        kw = {"model": MODEL, "messages": USER, "tools": tools, "seed": 111, "max_tokens": 80}
        if stream:
            mcp_server.script(111, body + "\n</tool_call>", "never reached")
            chunks = list(client.chat.completions.create(**kw, tool_choice="required", stream=True))
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
            assert text == "" and [tc.function.name for tc in calls] == ["lookup_order"]
            continue
        choice = client.chat.completions.create(**kw, tool_choice="required").choices[0]
        assert choice.finish_reason == "tool_calls" and not choice.message.content
        (tc,) = choice.message.tool_calls
        assert tc.function.name == "lookup_order" and json.loads(tc.function.arguments) == {"id": 9}
    mcp_server.wait_idle()


def test_streaming_with_a_server_tool(mcp_server: LiveServer, client: OpenAI) -> None:
    mcp_server.script(106, "One moment. ", call_text("add", a=20, b=22), "The sum is 42.")
    stream = client.chat.completions.create(
        model=MODEL,
        messages=USER,
        seed=106,
        max_tokens=200,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"tool_trace": True, "server_tools": ["add"]},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "One moment. The sum is 42."  # no call markup, no tool result
    last_choice = [c for c in chunks if c.choices][-1].choices[0]
    assert last_choice.finish_reason == "stop"
    assert [t["result"] for t in last_choice.model_extra["tool_trace"]] == ["42"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_streamed_client_tool_call(mcp_server: LiveServer, client: OpenAI) -> None:
    tools = [{"type": "function", "function": {"name": "ask_user", "parameters": {}}}]
    mcp_server.script(107, call_text("ask_user", question="Which city?"))
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=USER, tools=tools, seed=107, max_tokens=100, stream=True
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name == "ask_user"
    assert json.loads(calls[0].function.arguments) == {"question": "Which city?"}
    assert "".join(d.content or "" for d in deltas) == ""
    assert [c for c in chunks if c.choices][-1].choices[0].finish_reason == "tool_calls"


def test_n_choices_run_separately(mcp_server: LiveServer, client: OpenAI) -> None:
    mcp_server.script(200, "first")
    mcp_server.script(201, call_text("add", a=1, b=1), "second")
    resp = client.chat.completions.create(
        model=MODEL,
        messages=USER,
        seed=200,
        n=2,
        max_tokens=100,
        extra_body={"server_tools": "all"},
    )
    assert [(c.index, c.message.content) for c in resp.choices] == [(0, "first"), (1, "second")]
    tok = mcp_server.tokenizer
    expected = len(tok.encode("first", add_special_tokens=False)) + 1
    expected += len(tok.encode(call_text("add", a=1, b=1) + "second", add_special_tokens=False)) + 1
    assert resp.usage.completion_tokens == expected


def test_completions_endpoint(mcp_server: LiveServer, client: OpenAI) -> None:
    mcp_server.script(300, " world")
    out = client.completions.create(model=MODEL, prompt="Hello", seed=300, max_tokens=8, echo=True)
    assert out.choices[0].text == "Hello world" and out.choices[0].finish_reason == "stop"
    ids = mcp_server.tokenizer.encode("The sun")
    stream = client.completions.create(
        model=MODEL, prompt=[ids, ids], max_tokens=5, temperature=0, stream=True
    )
    texts: dict[int, str] = {0: "", 1: ""}
    for c in stream:
        for ch in c.choices:
            texts[ch.index] += ch.text
    assert texts[0] == texts[1] and texts[0]  # greedy: both prompts agree


def test_metrics_exposition(mcp_server: LiveServer, client: OpenAI) -> None:
    def count(name: str, **labels: str) -> float:
        return mcp_server.metric(name, **labels)

    before = {
        "ttft": count("augserve_time_to_first_token_seconds_count"),
        "norm": count("augserve_normalized_latency_seconds_per_token_count"),
        "stop": count("augserve_requests_finished_total", finish_reason="stop"),
        "tool": count("augserve_tool_call_duration_seconds_count", tool="add"),
    }
    mcp_server.script(400, call_text("add", a=1, b=2), "3")
    client.chat.completions.create(
        model=MODEL, messages=USER, seed=400, max_tokens=100, extra_body={"server_tools": ["add"]}
    )
    mcp_server.wait_idle()
    assert count("augserve_time_to_first_token_seconds_count") == before["ttft"] + 1
    assert count("augserve_normalized_latency_seconds_per_token_count") == before["norm"] + 1
    assert count("augserve_requests_finished_total", finish_reason="stop") == before["stop"] + 1
    assert count("augserve_tool_call_duration_seconds_count", tool="add") == before["tool"] + 1
    assert count("augserve_kv_blocks_total", location="device") == 512
    assert count("augserve_kv_blocks_total", location="host") == 64
    assert count("augserve_token_budget") > 0
    names = {k[0] for k in mcp_server.metrics()}
    for family in (
        "augserve_num_requests_paused",
        "augserve_num_requests_swapped",
        "augserve_requests_slo_met_total",
        "augserve_client_tool_calls_total",
    ):
        assert family in names, family
    for policy in ("preserve", "swap", "discard"):
        assert (
            "augserve_num_requests_paused",
            (("context_policy", policy),),
        ) in mcp_server.metrics()
