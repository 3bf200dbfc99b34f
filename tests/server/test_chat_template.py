"""Chat templates: rendering matches transformers' apply_chat_template, tool turns are
cut from the template itself, and bad messages give a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from augserve.engine.chat import ChatTemplate, TemplateRaisedError
from augserve.engine.chatml import CHATML_TEMPLATE
from augserve.engine.make_model import make_model
from augserve.engine.tool_prompt import generic_tools_messages

LLAMA_STYLE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    "<|start_header_id|>ipython<|end_header_id|>\n\n{{ message.content }}<|eot_id|>"
    "{%- elif message.tool_calls %}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{%- for c in message.tool_calls %}"
    '{{ {"name": c.function.name, "parameters": c.function.arguments} | tojson }}'
    "{%- endfor %}<|eot_id|>"
    "{%- else %}"
    "<|start_header_id|>{{ message.role }}<|end_header_id|>\n\n{{ message.content | trim }}"
    "<|eot_id|>"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{% endif %}"
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def conversation(arguments: object) -> list[dict]:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 21}'},
    ]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("tpl") / "m", seed=1)


def with_template(model_dir: Path, template: object, dst: Path) -> Path:
    dst.mkdir()
    for f in model_dir.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((dst / "tokenizer_config.json").read_text())
    cfg["chat_template"] = template
    (dst / "tokenizer_config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("source", [CHATML_TEMPLATE, LLAMA_STYLE], ids=["chatml", "llama"])
def test_render_matches_transformers(model_dir: Path, tmp_path: Path, source: str) -> None:
    """The same text as transformers' own renderer (what apply_chat_template runs)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    d = with_template(model_dir, source, tmp_path / "m")
    ours = ChatTemplate.from_model_dir(d)
    assert (ours.bos_token, ours.eos_token) == ("<s>", "</s>")
    for gen in (True, False):
        # OpenAI clients send arguments as a JSON string; we parse it as vLLM does
        mine = ours.render(
            conversation('{"city": "Paris"}'), tools=TOOLS, add_generation_prompt=gen
        )
        conv, tools = conversation({"city": "Paris"}), TOOLS
        if not ours.renders_tools:  # LLAMA_STYLE: augserve's generic tools prompt is added
            conv, tools = generic_tools_messages(conv, TOOLS, "hermes", True), None
        ref, _ = render_jinja_template(
            conversations=[conv],
            tools=tools,
            chat_template=source,
            add_generation_prompt=gen,
            bos_token="<s>",
            eos_token="</s>",
        )
        assert mine == ref[0]


def test_tool_turn_is_cut_from_the_template() -> None:
    chatml = ChatTemplate(CHATML_TEMPLATE)
    assert chatml.tool_turn("21C") == (
        "<|im_end|>\n<|im_start|>tool\n<tool_response>\n21C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    llama = ChatTemplate(LLAMA_STYLE, bos_token="<s>")
    assert llama.tool_turn("21C") == (
        "<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n21C<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    # a template without a tool role still gets a separator, never a crash
    plain = ChatTemplate("{% for m in messages %}{{ m.role }}{% endfor %}")
    assert plain.tool_turn("x") == "\nx\n"
    assert chatml.end_markers() == ("<|im_end|>",)
    assert llama.end_markers() == ("<|eot_id|>",)


def test_model_dir_variants(model_dir: Path, tmp_path: Path) -> None:
    named = [
        {"name": "default", "template": "D{{ messages[0].content }}"},
        {"name": "tool_use", "template": "T{{ tools | length }}"},
    ]
    d = with_template(model_dir, named, tmp_path / "named")
    tpl = ChatTemplate.from_model_dir(d)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert tpl.render(msgs) == "Dhi"
    assert tpl.render(msgs, tools=TOOLS) == "T1"
    (d / "chat_template.jinja").write_text("J{{ messages | length }}")
    assert ChatTemplate.from_model_dir(d).render(msgs) == "J1"
    with pytest.raises(ValueError, match="no chat template"):
        ChatTemplate.from_model_dir(model_dir)
    fallback = ChatTemplate.from_model_dir(model_dir, fallback=CHATML_TEMPLATE)
    assert fallback.source == CHATML_TEMPLATE and fallback.eos_token == "</s>"


def test_bad_messages_raise_value_errors() -> None:
    tpl = ChatTemplate(CHATML_TEMPLATE)
    with pytest.raises(ValueError, match="not valid JSON"):
        tpl.render(conversation("{city: Paris"))
    with pytest.raises(ValueError, match="image_url"):
        tpl.render([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])
    strict = ChatTemplate("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(TemplateRaisedError, match="roles must alternate"):
        strict.render([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="chat template failed"):
        ChatTemplate("{{ messages[0].content.nope() }}").render([{"role": "user", "content": "x"}])
