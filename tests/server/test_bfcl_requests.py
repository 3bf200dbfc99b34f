"""Requests shaped exactly as BFCL's chat path sends them (bfcl-eval's
`OpenAICompletionsHandler`, through the OpenAI SDK with OPENAI_BASE_URL): content as a
list of text parts, `store: false`, the SDK's own assistant message object sent back
(null `refusal`, `audio`, `function_call`), `tool` messages, and tool names with `_`
for `.` (issue 37)."""

from __future__ import annotations

import json

import pytest
from conftest import MODEL, LiveServer, call_text
from openai import OpenAI

# BFCL's `convert_to_tool` for an OpenAI-style model: `math.gcd` becomes `math_gcd`
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "math_gcd",
            "description": "Greatest common divisor of two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]


def first_turn(text: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": text}]}]


@pytest.fixture(scope="module")
def client(server: LiveServer) -> OpenAI:
    return OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0, timeout=60)


def query(client: OpenAI, messages: list) -> object:
    """BFCL's `_query_FC`: messages, model, temperature, store=False, tools."""
    return client.chat.completions.create(
        messages=messages, model=MODEL, temperature=0.001, store=False, tools=TOOLS, seed=5201
    )


def test_bfcl_multi_turn_round_trip(server: LiveServer, client: OpenAI) -> None:
    messages = first_turn("What is the GCD of 12 and 18?")
    server.script(5201, call_text("math.gcd", a=12, b=18))  # the model writes the dotted name
    resp = query(client, messages)
    msg = resp.choices[0].message
    assert resp.choices[0].finish_reason == "tool_calls"
    calls = msg.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("math_gcd", {"a": 12, "b": 18})
    ]
    sent = msg.model_dump()  # what the SDK sends back: null refusal / audio / function_call
    assert sent["refusal"] is None and sent["audio"] is None and "function_call" in sent
    messages.append(msg)  # `_add_assistant_message_FC` appends the SDK's object itself
    messages.append({"role": "tool", "content": "6", "tool_call_id": calls[0].id})
    server.script(5201, "The GCD is 6.")
    resp = query(client, messages)
    assert resp.choices[0].finish_reason == "stop"
    assert resp.choices[0].message.content == "The GCD is 6."
    messages.append(resp.choices[0].message)  # a text answer, sent back as it came
    messages += first_turn("And of 4 and 6?")
    server.script(5201, "2.")
    assert query(client, messages).choices[0].message.content == "2."


def test_bfcl_assistant_text_message_with_null_fields_is_accepted(
    server: LiveServer, client: OpenAI
) -> None:
    messages = [
        *first_turn("hi"),
        {
            "role": "assistant",
            "content": "Hello.",
            "refusal": None,
            "audio": None,
            "function_call": None,
            "tool_calls": None,
            "annotations": [],
        },
        *first_turn("GCD of 2 and 4?"),
    ]
    server.script(5201, "2.")
    assert query(client, messages).choices[0].message.content == "2."
