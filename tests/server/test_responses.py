"""`/v1/responses` with the official `openai` client and the OpenAI Agents SDK: text,
a client function tool round trip, a server-side tool run inside the engine, and the
streaming events, each parsed by the `openai` package's own types."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from conftest import MODEL, LiveServer, call_text
from openai import AsyncOpenAI, OpenAI
from pydantic import TypeAdapter

TOOL = {
    "type": "function",
    "name": "get_time",
    "description": "The time in a time zone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def client(server: LiveServer) -> OpenAI:
    return OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60)


def test_text_answer(server: LiveServer, client: OpenAI) -> None:
    server.script(4301, "Paris is in France.")
    r = client.responses.create(
        model=MODEL, input="Where is Paris?", instructions="Be brief.", extra_body={"seed": 4301}
    )
    assert r.status == "completed" and r.object == "response"
    assert r.output_text == "Paris is in France."
    (item,) = r.output
    assert item.type == "message" and item.role == "assistant"
    tok = server.tokenizer
    assert (
        r.usage.output_tokens
        == len(tok.encode("Paris is in France.", add_special_tokens=False)) + 1
    )
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


def test_length_limit_is_incomplete(server: LiveServer, client: OpenAI) -> None:
    server.script(4302, "one two three four five six seven")
    r = client.responses.create(
        model=MODEL, input="count", max_output_tokens=2, extra_body={"seed": 4302}
    )
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 2


def test_client_function_tool_round_trip(server: LiveServer, client: OpenAI) -> None:
    # the model ends its turn after the call (parallel_tool_calls is on by default)
    server.script(4303, call_text("get_time", tz="UTC"), "<|im_end|>", "It is noon.")
    first = client.responses.create(
        model=MODEL, input="What time is it?", tools=[TOOL], extra_body={"seed": 4303}
    )
    (call,) = [o for o in first.output if o.type == "function_call"]
    assert call.name == "get_time" and json.loads(call.arguments) == {"tz": "UTC"}
    assert first.status == "completed"
    server.wait_idle()
    history: list[Any] = [
        {"role": "user", "content": "What time is it?"},
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": call.call_id, "output": "12:00"},
    ]
    second = client.responses.create(
        model=MODEL, input=history, tools=[TOOL], extra_body={"seed": 4303}
    )
    assert second.output_text == "It is noon."
    fn = {"name": "get_time", "arguments": call.arguments}
    messages = [
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": call.call_id, "type": "function", "function": fn}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": "12:00"},
    ]  # fmt: skip
    tool_def = {"type": "function", "function": {k: v for k, v in TOOL.items() if k != "type"}}
    prompt = server.state.template.render(messages, tools=[tool_def])  # no server tool asked
    assert second.usage.input_tokens == len(
        server.tokenizer.encode(prompt, add_special_tokens=False)
    )


def test_server_tool_runs_inside_the_engine(server: LiveServer, client: OpenAI) -> None:
    server.script(4304, call_text("add", a=40, b=2), "The sum is 42.")
    r = client.responses.create(
        model=MODEL, input="Add 40 and 2", extra_body={"seed": 4304, "server_tools": ["add"]}
    )
    assert [o.type for o in r.output] == ["message"]  # the call ran on the server
    assert r.output_text == "The sum is 42."


def test_stream_events(server: LiveServer, client: OpenAI) -> None:
    from openai.types.responses import ResponseStreamEvent

    server.script(4305, "Hello there. ", call_text("get_time", tz="CET"))
    events = list(
        client.responses.create(
            model=MODEL, input="hi", tools=[TOOL], stream=True, extra_body={"seed": 4305}
        )
    )
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    for e in events:  # each parses as the openai package's own event type
        adapter.validate_python(e.model_dump(exclude_unset=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert text == "Hello there. " == final.output[0].content[0].text
    assert [o.type for o in final.output] == ["message", "function_call"]
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert json.loads(done[0].arguments) == {"tz": "CET"}
    assert kinds.index("response.output_item.added") < kinds.index("response.output_text.delta")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input.0.type"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "input.0.content.0.type",
        ),
        ({"max_output_tokens": "8"}, "max_output_tokens"),
        ({"model": "gpt-9"}, "model"),
    ],
)
def test_unserved_fields_are_400s(server: LiveServer, body: dict[str, Any], param: str) -> None:
    r = httpx.post(server.url + "/v1/responses", json={"model": MODEL, "input": "hi", **body})
    assert 400 <= r.status_code < 500 and r.json()["error"]["param"] == param, r.text


def test_agents_sdk_runs_a_function_tool(server: LiveServer) -> None:
    agents = pytest.importorskip("agents")
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool

    agents.set_tracing_disabled(True)
    calls: list[str] = []

    @function_tool
    def get_time(tz: str) -> str:
        """The time in a time zone."""
        calls.append(tz)
        return "12:00"

    server.script(4306, call_text("get_time", tz="UTC"), "<|im_end|>", "It is noon in UTC.")
    oa = AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    agent = Agent(
        name="clock",
        instructions="Answer with the time.",
        tools=[get_time],
        model=OpenAIResponsesModel(model=MODEL, openai_client=oa),
        model_settings=ModelSettings(extra_body={"seed": 4306}),
    )
    result = asyncio.run(Runner.run(agent, "What time is it?"))
    assert calls == ["UTC"]
    assert result.final_output == "It is noon in UTC."
