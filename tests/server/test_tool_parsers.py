"""Hermes and Llama-3 JSON tool-call parsers: detection at the call's last character,
segment boundaries, broken calls, and a streaming view that never shows call markup."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from augserve.engine.tool_parsers import (
    HermesToolParser,
    InvalidCall,
    Llama3JsonToolParser,
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
    # an unclosed call at the end of a finished request is shown as text
    assert p.content("Hi <tool_call>{", final=True) == "Hi <tool_call>{"


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


def test_forced_call_prefix_is_read_before_the_first_segment_only() -> None:
    """tool_choice 'required' / named: the prompt ends with the call's opening, so
    the first segment is parsed as opening + generated text; later ones as they are."""
    from augserve.engine.tool_parsers import ForcedCallParser

    hermes = HermesToolParser()
    named = hermes.forced_prefix("get_weather")
    assert named == '<tool_call>\n{"name": "get_weather", "arguments": '
    forced = ForcedCallParser(hermes, named)
    text = '{"city": "Rome"}}\n</tool_call>'
    assert forced.parse(text[:-3], 0) is None  # not closed yet
    call = forced.parse(text, 0)
    assert call is not None and (call.name, call.arguments) == ("get_weather", {"city": "Rome"})
    later = text + "result. " + '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    call2 = forced.parse(later, len(text) + 8)
    assert call2 is not None and call2.name == "add"
    assert forced.parse(text + "plain text", len(text)) is None  # no prefix after segment 1
    any_call = ForcedCallParser(hermes, hermes.forced_prefix(None))
    call3 = any_call.parse('{"name": "add", "arguments": {"a": 2}}\n</tool_call>', 0)
    assert call3 is not None and call3.arguments == {"a": 2}
    llama = Llama3JsonToolParser()
    forced_l = ForcedCallParser(llama, llama.forced_prefix("lookup"))
    call4 = forced_l.parse('{"id": 3}}', 0)
    assert call4 is not None and (call4.name, call4.arguments) == ("lookup", {"id": 3})
    assert forced_l.parse('{"id": 3', 0) is None
