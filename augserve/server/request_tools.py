"""Per request: which tools it may use, how the model's calls are parsed, who runs them.

- The server's tools are offered to a request only when it asks for them: by
  declaring a function of the same name in `tools` (the server's schema wins) or
  naming it in `server_tools` (or `"all"`); `--offer-server-tools always` offers
  every one to every request. Offered tools run on the server
  (`ToolRegistry.run`), while the request is paused in the scheduler; the result,
  wrapped as the chat template writes a tool message (`ChatTemplate.tool_turn`), is
  appended and generation goes on.
- Tools the client declares that the server does not hold end the request with
  finish_reason "tool_calls", for the client to run.
- A call to a tool nobody declared (a server tool the request was not offered
  included), or one whose JSON is broken, runs on the server too: it answers the
  model with an error, and the request goes on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from augserve.engine.chat import ChatTemplate
from augserve.engine.grammar import CALL_MARKUP, call_grammar
from augserve.engine.sampling_params import GrammarSpec
from augserve.engine.tool_parsers import make_tool_parser
from augserve.engine.tools import ParsedCall, ToolSession
from augserve.server.errors import APIError
from augserve.server.protocol import ChatCompletionRequest, ToolDef
from augserve.server.registered_tool import ToolOutcome
from augserve.server.tool_registry import ToolRegistry


class AllNamesExcept(frozenset[str]):
    """A 'set' holding every tool name except the given ones: the engine runs on the
    server every call whose name is `in` it (all but the client's own tools)."""

    def __contains__(self, name: object) -> bool:
        return not super().__contains__(name)


class CallExecutor:
    """The engine's `ToolExecutor` for one choice of one request; keeps the trace."""

    def __init__(
        self, registry: ToolRegistry, template: ChatTemplate, offered: frozenset[str]
    ) -> None:
        self.registry = registry
        self.template = template
        self.offered = offered  # the server tools this request may run
        self.trace: list[ToolOutcome] = []

    async def __call__(self, call: ParsedCall) -> str:
        out = await self.registry.run(call, self.offered)
        self.trace.append(out)
        return self.template.tool_turn(out.text)


def _check_schema(tool: ToolDef, i: int) -> None:
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
    from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]

    params = tool.function.parameters
    if params is None:
        return
    try:
        Draft202012Validator.check_schema(params)
    except SchemaError as exc:
        raise APIError(
            400,
            f"tools[{i}] ({tool.function.name!r}): parameters is not a valid "
            f"JSON schema: {exc.message}",
            param=f"tools.{i}.function.parameters",
        ) from None


def client_tools(req: ChatCompletionRequest) -> list[ToolDef]:
    tools = list(req.tools or [])
    names = [t.function.name for t in tools]
    for i, tool in enumerate(tools):
        if names.index(tool.function.name) != i:
            raise APIError(
                400,
                f"tools: the name {tool.function.name!r} is declared twice",
                param=f"tools.{i}.function.name",
            )
        _check_schema(tool, i)
    return tools


def check_message_calls(req: ChatCompletionRequest) -> None:
    """Earlier assistant tool calls must carry JSON-object arguments (400 otherwise)."""
    for i, m in enumerate(req.messages):
        for j, call in enumerate(m.tool_calls or []):
            where = f"messages.{i}.tool_calls.{j}.function.arguments"
            try:
                args = json.loads(call.function.arguments or "{}")
            except json.JSONDecodeError as exc:
                raise APIError(
                    400,
                    f"invalid tool arguments for {call.function.name!r}: not "
                    f"valid JSON ({exc.msg})",
                    param=where,
                ) from None
            if not isinstance(args, dict):
                raise APIError(
                    400,
                    f"invalid tool arguments for {call.function.name!r}: they "
                    "must be a JSON object",
                    param=where,
                )


def offered_server_tools(
    req: ChatCompletionRequest, declared: Sequence[ToolDef], registry: ToolRegistry
) -> frozenset[str]:
    """The server's tools this request is offered: those it declares by name in `tools`
    and those it lists in `server_tools` ("all": every one), or all of them with
    `--offer-server-tools always`. A listed name the server does not hold is a 400."""
    held = registry.names()
    asked = req.server_tools
    if isinstance(asked, list):
        for i, name in enumerate(asked):
            if name not in held:
                raise APIError(
                    400,
                    f"server_tools: this server has no tool named {name!r}",
                    param=f"server_tools.{i}",
                )
    if registry.offer == "always" or asked == "all":
        return held
    return frozenset(asked or ()) | (frozenset(t.function.name for t in declared) & held)


class RequestTools:
    """The tools of one chat request, after validation: the client's own, and the
    server's that it asked for (`offered_server_tools`). `tool_choice` picks among
    these only."""

    def __init__(
        self, req: ChatCompletionRequest, registry: ToolRegistry, parser_name: str
    ) -> None:
        self.registry = registry
        self.parser_name = parser_name
        declared = client_tools(req)
        check_message_calls(req)
        held = registry.names()
        self.offered = offered_server_tools(req, declared, registry)
        self.client_only = frozenset(t.function.name for t in declared) - held
        self.definitions: list[dict[str, Any]] = [
            t.model_dump(exclude_none=True) for t in declared if t.function.name not in held
        ] + registry.definitions(self.offered)  # a declared server tool: the server's schema
        choice = req.tool_choice
        self.enabled = choice != "none" and bool(self.definitions)
        if choice is not None and not isinstance(choice, str):
            name = choice.function.name
            if name not in self.client_only and name not in self.offered:
                raise APIError(
                    400,
                    f"tool_choice names an unknown tool {name!r}: it must be one of the "
                    "request's tools (declared in tools, or listed in server_tools)",
                    param="tool_choice.function.name",
                )
        elif choice == "required" and not self.definitions:
            raise APIError(
                400,
                "tool_choice is 'required' but no tools are available (declare them in "
                "tools, or ask for the server's with server_tools)",
                param="tool_choice",
            )
        self.parallel = req.parallel_tool_calls is not False  # unset: true, as OpenAI
        self.grammar = self._forced_grammar(choice) if self.enabled else None

    def _forced_grammar(self, choice: object) -> GrammarSpec | None:
        """ "required" / a named tool: the assistant's turn is one call, constrained to
        the tool's JSON schema inside the template family's call markup (any one of the
        tools for "required")."""
        if choice is None or choice == "auto":
            return None
        if self.parser_name not in CALL_MARKUP:
            raise APIError(
                400,
                f"tool_choice cannot be forced with the {self.parser_name} parser",
                param="tool_choice",
            )
        name = None if isinstance(choice, str) else choice.function.name  # type: ignore[attr-defined]
        fns = [d["function"] for d in self.definitions]
        tools = [(f["name"], f.get("parameters")) for f in fns if name in (None, f["name"])]
        return call_grammar(self.parser_name, tools)

    def names(self) -> frozenset[str]:
        return frozenset(d["function"]["name"] for d in self.definitions)

    def template_tools(self) -> list[dict[str, Any]] | None:
        return self.definitions if self.enabled else None

    def session(self, template: ChatTemplate) -> tuple[ToolSession | None, CallExecutor | None]:
        """A fresh parser and executor for one choice (None when tools are off)."""
        if not self.enabled:
            return None, None
        executor = CallExecutor(self.registry, template, self.offered)
        parser = make_tool_parser(self.parser_name, self.names())
        server = AllNamesExcept(self.client_only)
        return ToolSession(parser, executor, server, self.grammar, self.parallel), executor


def openai_tool_calls(calls: Iterable[ParsedCall], ids: Sequence[str]) -> list[dict[str, Any]]:
    return [
        {
            "id": cid,
            "type": "function",
            "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
        }
        for c, cid in zip(calls, ids, strict=True)
    ]


def trace_items(trace: Iterable[ToolOutcome]) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "arguments": t.arguments,
            "result": t.text,
            "error": t.error,
            "duration": round(t.duration, 6),
        }
        for t in trace
    ]
