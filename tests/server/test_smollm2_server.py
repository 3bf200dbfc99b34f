"""The server on the real trained model, SmolLM2-135M-Instruct (fetched once and cached;
skipped without it), through the official `openai` client: a plain question is
answered in English; with `tool_choice` naming a server-side tool (a Python function
or an MCP server's), the tool runs with schema-valid arguments and the answer carries
its `tool_trace`; a client tool comes back as `tool_calls`; `response_format`
json_schema returns JSON valid against the schema."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import write_tools

openai = pytest.importorskip("openai")
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def smol_server(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    import torch

    from augserve.engine.async_engine import AsyncLLMEngine
    from augserve.engine.builder import EngineArgs, build_engine
    from augserve.server.launch import BackgroundServer, ServeOptions, build_state

    torch.set_num_threads(2)
    patch = pytest.MonkeyPatch()
    patch.setenv("AUGSERVE_COMPILE", "0")  # eager: no one-off compile in a test
    tools = write_tools(tmp_path_factory.mktemp("tools") / "tools.json", mcp=True)
    engine = build_engine(EngineArgs(model=str(smollm2_dir), num_device_blocks=128))
    opts = ServeOptions(("augserve-default", "smollm2"), str(tools))
    handle = BackgroundServer(build_state(AsyncLLMEngine(engine), smollm2_dir, opts)).start()
    yield handle
    handle.stop()
    patch.undo()


def _client(server: Any) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", timeout=120)


def test_plain_question_answered_in_english(smol_server: Any) -> None:
    r = _client(smol_server).chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Which city is the capital of France?"}],
        max_tokens=32,
        temperature=0,
    )
    text = r.choices[0].message.content
    assert "Paris" in text and r.choices[0].finish_reason == "stop", text
    assert r.model == "smollm2"


def test_named_server_tool_runs_and_its_trace_comes_back(smol_server: Any) -> None:
    r = _client(smol_server).chat.completions.create(
        model="augserve-default",
        messages=[{"role": "user", "content": "What's the weather in Paris?"}],
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=64,
        temperature=0,
        extra_body={"tool_trace": True},
    )
    trace = r.choices[0].model_extra["tool_trace"]
    assert [t["name"] for t in trace][:1] == ["get_weather"], trace
    args = trace[0]["arguments"]
    args = json.loads(args) if isinstance(args, str) else args
    assert isinstance(args.get("city"), str) and trace[0]["error"] is None, trace
    assert '"temp": 21' in trace[0]["result"]  # the tool's own answer
    # SmolLM2 answers the tool turn by echoing `<tool_response>...</tool_response>`:
    # that markup is not content (issue 37)
    assert "tool_response" not in (r.choices[0].message.content or "")
    assert r.choices[0].finish_reason == "stop"


SHOUT = {
    "type": "function",
    "function": {
        "name": "mcp_shout",
        "description": "Upper-case a text.",
        "parameters": {
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": 40}},
            "required": ["text"],
        },
    },
}


def test_named_mcp_tool_runs_and_its_trace_comes_back(smol_server: Any) -> None:
    r = _client(smol_server).chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Shout the word hello."}],
        tools=[SHOUT],
        tool_choice={"type": "function", "function": {"name": "mcp_shout"}},
        max_tokens=64,
        temperature=0,
        extra_body={"tool_trace": True},
    )
    trace = r.choices[0].model_extra["tool_trace"]
    assert [t["name"] for t in trace][:1] == ["mcp_shout"], trace
    args = trace[0]["arguments"]
    args = json.loads(args) if isinstance(args, str) else args
    assert isinstance(args.get("text"), str) and trace[0]["error"] is None, trace
    assert args["text"].upper() in trace[0]["result"]  # the MCP server's own answer
    assert r.choices[0].finish_reason in ("stop", "length")


def test_client_tool_comes_back_as_tool_calls(smol_server: Any) -> None:
    lookup = {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "integer"}},
                "required": ["order_id"],
            },
        },
    }
    r = _client(smol_server).chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Where is my order 12345?"}],
        tools=[lookup],  # the server's own tools are offered too: name the client's
        tool_choice={"type": "function", "function": {"name": "lookup_order"}},
        max_tokens=48,
        temperature=0,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (call,) = choice.message.tool_calls
    assert call.function.name == "lookup_order"
    assert isinstance(json.loads(call.function.arguments)["order_id"], int)
    assert not choice.message.content  # no call markup in the content


def test_response_format_json_schema_is_valid(smol_server: Any) -> None:
    import jsonschema

    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 30},
            "country": {"type": "string", "maxLength": 30},
        },
        "required": ["city", "country"],
        "additionalProperties": False,
    }
    r = _client(smol_server).chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Name the capital of France and its country."}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "capital", "schema": schema},
        },
        max_tokens=64,
        temperature=0,
    )
    data = json.loads(r.choices[0].message.content)
    jsonschema.validate(data, schema)
