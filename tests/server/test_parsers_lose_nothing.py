"""No tool call is lost, whatever form the model writes it in (issue 37): several
tagged blocks, a JSON list inside one `<tool_call>`, several ```json fences, a bare or
fenced JSON array, Mistral's `[TOOL_CALLS]` list, `;`-separated Llama-3 calls. With
`parallel_tool_calls` true (and unset, as OpenAI) every call comes back, with false
the first; call markup and echoed `<tool_response>` markup never reach `content`,
streamed or not. Parsers first, then the same texts through the HTTP server."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from conftest import MODEL, LiveServer, call_text

from augserve.engine.tool_parsers import (
    HermesToolParser,
    InvalidCall,
    Llama3JsonToolParser,
    MistralToolParser,
)
from augserve.engine.tools import calls_of

NAMES = frozenset({"find_weather", "get_time"})
A = {"name": "find_weather", "arguments": {"city": "Paris"}}
B = {"name": "get_time", "arguments": {"tz": "CET"}}
WANT = [("find_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})]


def fence(obj: object) -> str:
    return "```json\n" + json.dumps(obj) + "\n```"


def tagged(obj: object) -> str:
    return "<tool_call>\n" + json.dumps(obj) + "\n</tool_call>"


LOOSE_FORMS = {
    "two fences": fence(A) + "\n\n" + fence(B),
    "fenced array": fence([A, B]),
    "bare array": json.dumps([A, B]),
    "bare objects": json.dumps(A) + "\n" + json.dumps(B),
    "plain fences": "```\n" + json.dumps(A) + "\n```\n```\n" + json.dumps(B) + "\n```",
}


def names_args(call: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, c.arguments) for c in calls_of(call)]


def streamed_views(parser: Any, text: str) -> list[str]:
    """The parser's content view after each character, as a server streams it; each
    view must extend the one before (a client only gets differences)."""
    views = [parser.content(text[:n], final=False) for n in range(len(text) + 1)]
    views.append(parser.content(text, final=True))
    for before, after in zip(views, views[1:], strict=False):
        assert after.startswith(before), (before, after)
    return views


@pytest.mark.parametrize("form", sorted(LOOSE_FORMS))
def test_every_loose_call_is_read_at_the_end(form: str) -> None:
    p = HermesToolParser(NAMES)
    text = LOOSE_FORMS[form]
    assert names_args(p.parse_final(text, 0)) == WANT
    assert all("find_weather" not in v for v in streamed_views(p, text))  # never shown


def test_a_list_inside_one_tool_call_tag_is_its_calls_not_an_error() -> None:
    p = HermesToolParser(NAMES)
    text = "Checking both. " + tagged([A, B])
    call = p.parse(text, 0)
    assert not isinstance(call, InvalidCall)
    assert names_args(call) == WANT
    assert p.parse(text[:-1], 0) is None  # complete exactly at its last character
    assert streamed_views(p, text)[-1] == "Checking both. "
    unclosed = "<tool_call>\n" + json.dumps([A, B])  # cut before the closing tag
    assert names_args(p.parse_final(unclosed, 0)) == WANT
    open_list = "<tool_call>[" + json.dumps(A) + ', {"name": "get_ti'
    assert names_args(p.parse_final(open_list, 0)) == WANT[:1]


def test_several_tagged_blocks_are_all_read_at_the_end() -> None:
    p = HermesToolParser(NAMES)
    text = tagged(A) + "\n" + tagged(B) + "\n<tool_call>\n" + json.dumps(A)
    assert names_args(p.parse_final(text, 0)) == WANT + WANT[:1]


def test_a_json_answer_or_an_undeclared_name_stays_text() -> None:
    p = HermesToolParser(NAMES)
    other = {"name": "rm_rf", "arguments": {}}
    for text in (json.dumps([A, other]), json.dumps([1, 2]), fence({"answer": 4}), "[see](x)"):
        assert p.parse_final(text, 0) is None, text
        assert p.content(text, final=True) == text
    assert p.content("[Note: it rains", final=False) == "[Note: it rains"  # not held back


def test_echoed_tool_response_markup_never_reaches_content() -> None:
    p = HermesToolParser(NAMES)
    text = '<tool_response>\n{"temp": 21}\n</tool_response>\nIt is 21 C in Paris.'
    views = streamed_views(p, text)
    assert views[-1] == "It is 21 C in Paris."
    assert not any("tool_response" in v or "temp" in v for v in views)
    assert p.content("Done. <tool_response>\n{", final=True) == "Done. "
    after = '<tool_response>\n{"temp": 21}\n</tool_response>\n' + fence(A)
    assert names_args(p.parse_final(after, 0)) == WANT[:1]  # a call after the echo


def test_mistral_list_gives_every_call() -> None:
    p = MistralToolParser(NAMES)
    text = "[TOOL_CALLS]" + json.dumps([A, B])
    assert names_args(p.parse(text, 0)) == WANT
    assert names_args(p.parse_final("[TOOL_CALLS]" + json.dumps([A, B])[:-1], 0)) == WANT
    two = "[TOOL_CALLS]find_weather[ARGS]" + json.dumps(A["arguments"]) + "[TOOL_CALLS]get_time"
    two += "[ARGS]" + json.dumps(B["arguments"])
    first = p.parse(two, 0)
    assert names_args(first) == WANT[:1] and first is not None
    assert names_args(p.parse_final(two, 0)) == WANT
    assert p.content("Sure.[TOOL_CALLS][", final=True) == "Sure."


def test_llama3_json_list_and_semicolons() -> None:
    p = Llama3JsonToolParser(NAMES)
    a = {"name": "find_weather", "parameters": {"city": "Paris"}}
    b = {"name": "get_time", "parameters": {"tz": "CET"}}
    assert names_args(p.parse(json.dumps([a, b]), 0)) == WANT
    semi = json.dumps(a) + "; " + json.dumps(b)
    assert names_args(p.parse_final(semi, 0)) == WANT
    assert p.content(semi, final=True) == ""


# --- through the server: the same texts, scripted into a random-weight model --------

USER = [{"role": "user", "content": "Weather and time in Paris?"}]
CLIENT_TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in sorted(NAMES)
]


def chat(srv: LiveServer, seed: int, *texts: str, **body: Any) -> dict[str, Any]:
    srv.script(seed, *texts)
    body = {"model": MODEL, "messages": USER, "tools": CLIENT_TOOLS, "seed": seed, **body}
    body.setdefault("max_tokens", 300)
    r = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def returned(choice: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    calls = choice["message"].get("tool_calls") or []
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize(
    "text",
    [tagged(A) + "\n" + tagged(B), tagged([A, B]), LOOSE_FORMS["two fences"]]
    + [LOOSE_FORMS["bare array"], LOOSE_FORMS["fenced array"]],
    ids=["two tags", "list in a tag", "two fences", "bare array", "fenced array"],
)
def test_every_call_comes_back_by_default_and_the_first_without_parallel(
    server: LiveServer, text: str
) -> None:
    for seed, extra, want in ((5101, {}, WANT), (5102, {"parallel_tool_calls": False}, WANT[:1])):
        out = chat(server, seed, text, tool_trace=True, **extra)
        assert out["finish_reason"] == "tool_calls", out
        assert returned(out) == want
        assert out["tool_trace"] == []  # nothing ran on the server (no error answer)
        assert not out["message"]["content"]


def test_streamed_deltas_carry_every_call_and_no_markup(server: LiveServer) -> None:
    server.script(5103, "One moment. ", tagged([A, B]))
    body = {"model": MODEL, "messages": USER, "tools": CLIENT_TOOLS, "seed": 5103}
    content, calls, reasons = "", [], []
    with httpx.stream(
        "POST", server.url + "/v1/chat/completions", json={**body, "stream": True}, timeout=120
    ) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            for ch in json.loads(line[6:])["choices"]:
                content += ch["delta"].get("content") or ""
                calls += ch["delta"].get("tool_calls") or []
                reasons.append(ch["finish_reason"])
    assert content == "One moment. "
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == WANT
    assert [c["index"] for c in calls] == [0, 1] and reasons[-1] == "tool_calls"


def test_echoed_tool_response_after_a_server_tool_turn_is_not_content(
    server: LiveServer,
) -> None:
    echo = "<tool_response>\n5\n</tool_response>\n"
    out = chat(
        server,
        5104,
        call_text("add", a=2, b=3),
        echo,
        "The sum is 5.",
        tool_trace=True,
        server_tools=["add"],
    )
    assert out["tool_trace"][0]["result"] == "5"
    assert out["message"]["content"] == "The sum is 5."


def test_tool_call_parser_flag_takes_mistral_and_auto() -> None:
    from augserve.cli import build_parser
    from augserve.server.launch import ServeOptions

    parse = build_parser().parse_args
    assert parse(["serve"]).tool_call_parser == "auto"
    assert parse(["serve", "--tool-call-parser", "mistral"]).tool_call_parser == "mistral"
    ServeOptions(("m",), tool_call_parser="auto")
    with pytest.raises(ValueError, match="tool_call_parser"):
        ServeOptions(("m",), tool_call_parser="nope")


def test_a_list_of_server_calls_in_one_tag_runs_every_call(server: LiveServer) -> None:
    calls = [
        {"name": "add", "arguments": {"a": 2, "b": 3}},
        {"name": "add", "arguments": {"a": 1, "b": 1}},
    ]
    out = chat(server, 5105, tagged(calls), "Done.", tool_trace=True, server_tools=["add"])
    assert [t["result"] for t in out["tool_trace"]] == ["5", "2"]
    assert out["finish_reason"] == "stop" and out["message"]["content"] == "Done."
