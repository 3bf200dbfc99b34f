"""Server tools are offered per request: a server tool is in a request's prompt, and
callable, only when the request declares a function of its name in `tools` (the
server's schema wins) or names it in `server_tools` ("all": every one);
`--offer-server-tools always` offers them all to every request. `tool_choice` picks
among the request's own tools only."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import augserve_test_tools as sample
import httpx
import pytest
from conftest import MODEL, LiveServer, call_text

from augserve.engine.chat import ChatTemplate
from augserve.engine.chatml import CHATML_TEMPLATE
from augserve.engine.tools import ParsedCall
from augserve.server.errors import APIError
from augserve.server.protocol import ChatCompletionRequest
from augserve.server.request_tools import RequestTools
from augserve.server.tool_config import ToolsConfig
from augserve.server.tool_registry import ToolRegistry

HI = [{"role": "user", "content": "Hi"}]
ORDER = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99}},
            "required": ["id"],
        },
    },
}


def registry(offer: str = "request") -> ToolRegistry:
    tools = [{"name": n, "python": f"augserve_test_tools:{n}"} for n in ("get_weather", "add")]
    return ToolRegistry(ToolsConfig.from_dict({"tools": tools}), offer)


def request_tools(reg: ToolRegistry, **body: Any) -> RequestTools:
    req = ChatCompletionRequest.model_validate({"model": MODEL, "messages": HI, **body})
    return RequestTools(req, reg, "hermes")


def offered(tools: RequestTools) -> list[str]:
    return [d["function"]["name"] for d in tools.template_tools() or []]


# --- which tools a request is offered (no server needed) ---------------------------------
def test_a_request_is_offered_only_the_server_tools_it_asks_for() -> None:
    reg = registry()
    assert request_tools(reg).template_tools() is None  # none asked, none offered
    assert offered(request_tools(reg, tools=[ORDER])) == ["lookup_order"]
    assert offered(request_tools(reg, server_tools=["add"])) == ["add"]
    assert offered(request_tools(reg, server_tools="all")) == ["get_weather", "add"]
    assert offered(request_tools(registry("always"))) == ["get_weather", "add"]
    # a declared function of a server tool's name: the server's schema, and it runs there
    mine = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
    tools = request_tools(reg, tools=[mine, ORDER])
    assert offered(tools) == ["lookup_order", "add"]
    assert tools.definitions[1] == reg.tools["add"].definition() and tools.offered == {"add"}
    assert tools.client_only == {"lookup_order"}


def test_unknown_server_tools_and_choices_outside_the_request_are_400s() -> None:
    reg = registry()
    with pytest.raises(APIError, match="no tool named 'nope'") as err:
        request_tools(reg, server_tools=["add", "nope"])
    assert err.value.status == 400 and err.value.param == "server_tools.1"
    named = {"type": "function", "function": {"name": "get_weather"}}
    with pytest.raises(APIError, match="unknown tool 'get_weather'") as err:
        request_tools(reg, tools=[ORDER], tool_choice=named)  # a server tool not asked for
    assert err.value.param == "tool_choice.function.name"
    with pytest.raises(APIError, match="no tools are available"):
        request_tools(reg, tool_choice="required")
    assert request_tools(reg, server_tools=["get_weather"], tool_choice=named).grammar is not None


def test_required_with_one_client_tool_forces_that_tool_only() -> None:
    tools = request_tools(registry(), tools=[ORDER], tool_choice="required")
    assert tools.grammar is not None and "get_weather" not in (tools.grammar.source)
    assert "lookup_order" in (tools.grammar.source)


def test_a_call_of_a_server_tool_the_request_was_not_offered_does_not_run() -> None:
    reg = registry()
    tools = request_tools(reg, tools=[ORDER])
    session, executor = tools.session(ChatTemplate(CHATML_TEMPLATE))
    assert session is not None and executor is not None
    before = len(sample.calls)
    asyncio.run(executor(ParsedCall("get_weather", {"city": "Oslo"})))
    (step,) = executor.trace
    assert step.error == "unknown_tool" and len(sample.calls) == before


def test_the_offer_flag() -> None:
    from augserve.cli import build_parser

    assert build_parser().parse_args(["serve"]).offer_server_tools == "request"
    args = build_parser().parse_args(["serve", "--offer-server-tools", "always"])
    assert args.offer_server_tools == "always"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--offer-server-tools", "sometimes"])
    with pytest.raises(ValueError, match="offer must be one of"):
        ToolRegistry(offer="sometimes")


# --- over HTTP ---------------------------------------------------------------------------
def chat(srv: LiveServer, **body: Any) -> dict[str, Any]:
    body = {"model": MODEL, "messages": HI, **body}
    r = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_hi_costs_the_same_prompt_tokens_as_on_a_server_without_tools(server: LiveServer) -> None:
    """The server holds six tools; a plain "Hi" pays for none of them."""
    plain = chat(server, max_tokens=1)["usage"]["prompt_tokens"]
    bare = server.state.template.render(HI, tools=None)
    assert plain == len(server.tokenizer.encode(bare, add_special_tokens=False))
    asked = chat(server, max_tokens=1, server_tools="all")["usage"]["prompt_tokens"]
    assert asked > plain + 100  # what every request paid before


def test_required_with_only_a_client_tool_returns_that_client_call(server: LiveServer) -> None:
    """Random weights under the "required" grammar: the one call is always the client's
    (a server tool the request did not ask for is never a candidate), and it comes back
    as tool_calls with no markup in content."""
    for seed in range(4):
        out = chat(
            server, tools=[ORDER], tool_choice="required", seed=seed, max_tokens=120,
            temperature=1.0, tool_trace=True,
        )["choices"][0]  # fmt: skip
        assert out["finish_reason"] == "tool_calls", out
        (tc,) = out["message"]["tool_calls"]
        assert tc["function"]["name"] == "lookup_order"
        assert isinstance(json.loads(tc["function"]["arguments"])["id"], int)
        assert out["tool_trace"] == [] and not out["message"]["content"]


def test_a_model_calling_a_server_tool_it_was_not_offered_gets_an_error(
    server: LiveServer,
) -> None:
    before = len(sample.calls)
    server.script(4401, call_text("get_weather", city="Oslo"), "ok")
    out = chat(server, tools=[ORDER], seed=4401, max_tokens=120, tool_trace=True)["choices"][0]
    assert [(t["name"], t["error"]) for t in out["tool_trace"]] == [("get_weather", "unknown_tool")]
    assert out["message"]["content"] == "ok" and len(sample.calls) == before
    server.wait_idle()
