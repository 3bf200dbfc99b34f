"""A chat template that renders no tools (SmolLM2's GGUF template) gets the generic
tools prompt: every offered tool's name, description and schema, and the call format
of the server's parser; earlier tool calls are written in that format (issue 37)."""

from __future__ import annotations

import json

import pytest

from augserve.engine.chat import ChatTemplate
from augserve.engine.chatml import CHATML_TEMPLATE
from augserve.engine.tool_parsers import make_tool_parser

# the template embedded in SmolLM2-135M-Instruct's GGUF file (tokenizer.chat_template)
SMOLLM2_GGUF = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by "
    "Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "a city name"}},
    "required": ["city"],
}
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city, in Celsius.",
        "parameters": SCHEMA,
    },
}
USER = [{"role": "user", "content": "Weather in Paris?"}]


def test_probe_tells_which_templates_render_tools() -> None:
    assert not ChatTemplate(SMOLLM2_GGUF).renders_tools
    assert not ChatTemplate(SMOLLM2_GGUF).renders_calls
    assert ChatTemplate(CHATML_TEMPLATE).renders_tools
    assert ChatTemplate(CHATML_TEMPLATE).renders_calls


@pytest.mark.parametrize("fmt", ["hermes", "mistral", "llama3_json"])
def test_a_declared_tool_reaches_the_prompt_with_its_description_and_schema(fmt: str) -> None:
    tpl = ChatTemplate(SMOLLM2_GGUF, tool_format=fmt)
    bare, offered = tpl.render(USER), tpl.render(USER, tools=[TOOL])
    assert "get_weather" not in bare and len(offered) > len(bare)
    assert "Current weather of a city, in Celsius." in offered
    assert json.dumps(SCHEMA) in offered
    assert offered.count("<|im_start|>system") == 1  # merged into one system block
    example = {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]", "llama3_json": '"parameters"'}
    assert example[fmt] in offered


def test_earlier_calls_are_written_in_the_format_the_parser_reads() -> None:
    call = {"id": "c1", "type": "function"}
    call["function"] = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    msgs = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "c1"},
    ]
    for fmt in ("hermes", "mistral", "llama3_json"):
        text = ChatTemplate(SMOLLM2_GGUF, tool_format=fmt).render(msgs, tools=[TOOL])
        turn = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
        parsed = make_tool_parser(fmt, frozenset({"get_weather"})).parse_final(turn, 0)
        assert parsed is not None and parsed.arguments == {"city": "Paris"}, (fmt, turn)
        assert '{"temp": 21}' in text


def test_a_template_that_renders_tools_is_left_alone() -> None:
    tpl = ChatTemplate(CHATML_TEMPLATE)
    offered = tpl.render(USER, tools=[TOOL])
    assert "You can call the following functions" not in offered
    assert "get_weather" in offered
