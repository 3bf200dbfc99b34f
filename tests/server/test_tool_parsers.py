"""Hermes, Llama-3 JSON and Mistral tool-call parsers: detection at the call's last character,
segment boundaries, broken calls, and a streaming view that never shows call markup."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from augserve.engine.tool_parsers import (
    HermesToolParser,
    InvalidCall,
    Llama3JsonToolParser,
    MistralToolParser,
    detect_tool_parser,
    json_object_end,
    make_tool_parser,
)

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def first_detection(parser, text: str, segment_start: int = 0) -> int | None:
    """The length of the shortest prefix at which the parser reports a call."""
    for n in range(segment_start, len(text) + 1):
        if parser.parse(text[:n], segment_start) is not None:
            return n
    return None


def test_hermes_detects_the_call_exactly_when_it_closes() -> None:
    text = "Let me check. " + CALL + " trailing"
    p = HermesToolParser()
    n = first_detection(p, text)
    assert n == len("Let me check. " + CALL)
    call = p.parse(text[:n], 0)
    assert call is not None and not isinstance(call, InvalidCall)
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris"})
    assert call.raw == CALL


def test_hermes_ignores_calls_before_the_segment() -> None:
    p = HermesToolParser()
    done = CALL + "\nresult: 21C\n"
    assert p.parse(done, len(done)) is None
    second = done + '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>'
    call = p.parse(second, len(done))
    assert call is not None and call.name == "f" and call.arguments == {"x": 1}


def test_hermes_broken_calls_are_reported_not_dropped() -> None:
    p = HermesToolParser()
    bad_json = p.parse("<tool_call>{name: f}</tool_call>", 0)
    assert isinstance(bad_json, InvalidCall) and "not valid JSON" in bad_json.error
    no_name = p.parse('<tool_call>{"arguments": {}}</tool_call>', 0)
    assert isinstance(no_name, InvalidCall) and '"name"' in no_name.error
    bad_args = p.parse('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', 0)
    assert isinstance(bad_args, InvalidCall) and bad_args.name == "f"
    assert "object" in bad_args.error


def test_hermes_content_holds_back_a_possible_tag() -> None:
    p = HermesToolParser()
    assert p.content("Hello <tool", final=False) == "Hello "
    assert p.content("Hello <tool", final=True) == "Hello <tool"
    assert p.content("Hello <tools>", final=False) == "Hello <tools>"
    assert p.content("Hi " + CALL, final=True) == "Hi "
    # call markup never reaches content, even unclosed at the end
    assert p.content("Hi <tool_call>{", final=True) == "Hi "


@settings(max_examples=200, deadline=None)
@given(
    before=st.text(alphabet=st.sampled_from(list("ab <>_/tolcl\n")), max_size=30),
    with_call=st.booleans(),
)
def test_hermes_streaming_view_only_grows_and_never_shows_markup(
    before: str, with_call: bool
) -> None:
    p = HermesToolParser()
    text = before + (CALL if with_call else "")
    shown = ""
    for n in range(len(text) + 1):
        seg = text[:n]
        if p.parse(seg, 0) is not None:
            break  # the engine pauses here
        view = p.content(seg, final=False)
        assert view.startswith(shown)  # a client can stream the difference
        shown = view
        if "<tool_call>" in seg:
            assert "<tool_call>" not in view
    final = p.content(text, final=True)
    assert final.startswith(shown)
    if with_call and "<tool_call>" not in before:
        assert final == before


def test_llama3_json_call_with_and_without_python_tag() -> None:
    p = Llama3JsonToolParser()
    body = '{"name": "search", "parameters": {"q": "a {brace} \\" in a string"}}'
    for text in (body, "  <|python_tag|>" + body):
        n = first_detection(p, text)
        assert n == len(text)
        call = p.parse(text, 0)
        assert call is not None and call.name == "search"
        assert call.arguments == {"q": 'a {brace} " in a string'}
        assert p.content(text[: n - 1], final=False) == ""  # held while it may be a call
        assert p.content(text, final=True) == ""


def test_llama3_json_plain_text_and_non_call_json_are_content() -> None:
    p = Llama3JsonToolParser()
    assert p.parse("The answer is 4.", 0) is None
    assert p.content("The answer is 4.", final=False) == "The answer is 4."
    obj = '{"answer": 4}'
    assert p.parse(obj, 0) is None
    assert p.content(obj, final=False) == obj
    assert p.content('{"answer"', final=False) == ""
    assert p.content('{"answer"', final=True) == '{"answer"'
    # segments after a tool result start fresh
    text = "ignored " + '{"name": "f", "arguments": {}}'
    call = p.parse(text, len("ignored "))
    assert call is not None and call.name == "f"


def test_json_object_end_counts_braces_outside_strings() -> None:
    s = '{"a": "}{", "b": {"c": 1}} tail'
    end = json_object_end(s)
    assert end is not None and json.loads(s[:end]) == {"a": "}{", "b": {"c": 1}}
    assert json_object_end('{"a": {') is None


def test_parser_registry_and_detection() -> None:
    assert isinstance(make_tool_parser("hermes"), HermesToolParser)
    assert isinstance(make_tool_parser("llama3_json"), Llama3JsonToolParser)
    try:
        make_tool_parser("nope")
    except ValueError as exc:
        assert "nope" in str(exc) and "hermes" in str(exc)
    else:
        raise AssertionError("an unknown parser name must raise")
    assert detect_tool_parser("... <tool_call> ...") == "hermes"
    assert detect_tool_parser("<|start_header_id|>ipython<|end_header_id|>") == "llama3_json"


NAMES = frozenset({"get_weather"})
ARGS = {"city": "Paris"}
BODY = json.dumps({"name": "get_weather", "arguments": ARGS})


def test_hermes_tolerant_cases_are_calls_at_the_end() -> None:
    """vLLM's Hermes parser accepts an unclosed call at the end; bare JSON and a json
    fence naming a declared tool are calls too. None of it reaches content."""
    p = HermesToolParser(NAMES)
    cases = [
        "Sure. <tool_call>\n" + BODY,  # unclosed
        "Sure. <tool_call>\n" + BODY + "\n</tool_c",  # cut inside the closing tag
        BODY,  # bare JSON
        "  " + BODY + "\n",
        "```json\n" + BODY + "\n```",  # a fence
        "```json\n" + BODY,  # an unclosed fence
        "```\n" + json.dumps({"name": "get_weather", "parameters": ARGS}) + "\n```",
    ]
    for text in cases:
        assert p.parse(text, 0) is None or "<tool_call>" in text
        call = p.parse_final(text, 0)
        assert call is not None and (call.name, call.arguments) == ("get_weather", ARGS), text
        final = p.content(text, final=True)
        assert "tool_call" not in final and "get_weather" not in final, text
        for n in range(len(text)):  # streaming never shows any of it either
            assert "get_weather" not in p.content(text[:n], final=False)


def test_hermes_tolerance_needs_a_declared_tool_and_whole_json() -> None:
    p = HermesToolParser(NAMES)
    other = json.dumps({"name": "rm_rf", "arguments": {}})
    for text in (other, '{"answer": 4}', '<tool_call>\n{"name": "get_weather", "argu'):
        assert p.parse_final(text, 0) is None
    assert p.content('{"answer": 4}', final=True) == '{"answer": 4}'  # JSON answers stay
    assert p.content('{"answer": 4}', final=False) == '{"answer": 4}'
    assert p.content("```python\nprint(1)\n```", final=False) == "```python\nprint(1)\n```"
    assert HermesToolParser().parse_final(BODY, 0) is None  # no declared tools


def test_mistral_parser_both_formats_and_tolerance() -> None:
    p = MistralToolParser(NAMES)
    listed = "[TOOL_CALLS][" + BODY + "]"
    n = first_detection(p, listed)
    assert n == len(listed)
    call = p.parse(listed, 0)
    assert call is not None and (call.name, call.arguments) == ("get_weather", ARGS)
    newer = "[TOOL_CALLS]get_weather[ARGS]" + json.dumps(ARGS)
    call = p.parse(newer, 0)
    assert call is not None and (call.name, call.arguments) == ("get_weather", ARGS)
    unclosed = "[TOOL_CALLS][" + BODY
    assert p.parse(unclosed, 0) is None
    call = p.parse_final(unclosed, 0)
    assert call is not None and call.name == "get_weather"
    assert p.content("Hi [TOOL_CALLS][" + BODY, final=True) == "Hi "
    assert p.content("Hi [TOOL", final=False) == "Hi "
    broken = p.parse("[TOOL_CALLS][{oops}]", 0)
    assert isinstance(broken, InvalidCall)


def test_llama3_json_fence_and_detection_of_mistral() -> None:
    p = Llama3JsonToolParser(NAMES)
    fenced = "```json\n" + json.dumps({"name": "get_weather", "parameters": ARGS}) + "\n```"
    call = p.parse_final(fenced, 0)
    assert call is not None and call.arguments == ARGS
    assert p.content(fenced, final=True) == ""
    assert detect_tool_parser("{{ '[TOOL_CALLS]' }}") == "mistral"
    assert isinstance(make_tool_parser("mistral"), MistralToolParser)
