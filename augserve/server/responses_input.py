"""`POST /v1/responses`' request, and its translation into a chat request.

The subset of OpenAI's Responses API that the OpenAI Agents SDK's default model
(`OpenAIResponsesModel`) sends: `input` as a string or a list of items (messages
with text parts, `function_call` and `function_call_output` items, `reasoning`
items, which are dropped), `instructions`, `function` tools, `tool_choice`,
`max_output_tokens`, `temperature`, `top_p`, `parallel_tool_calls`, `text`,
`stream`. The server's own tools (`--tools`) run inside the engine as on
`/v1/chat/completions`, offered as there (`server_tools`, or declared by name).
What changes results and is not served is a 400 naming it: hosted tools
(web/file search, computer, code interpreter, remote MCP), `previous_response_id`
and `conversation` (nothing is stored), `background`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from augserve.server.errors import APIError
from augserve.server.protocol import ChatCompletionRequest, ServerTools, _Model


class ResponsesRequest(_Model):
    model: str
    input: str | Annotated[list[dict[str, Any]], Field(min_length=1)]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    store: bool | None = None  # accepted; nothing is stored
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    background: bool | None = None
    text: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    include: list[str] | None = None
    seed: int | None = None  # augserve's extension (as on chat), e.g. via extra_body
    cache_salt: Annotated[str, Field(min_length=1, max_length=256)] | None = None  # as chat's
    server_tools: ServerTools = None  # augserve's extension (as on chat)


def _text(content: Any, where: str) -> str:
    """The text of a message's content: a string, or input_text/output_text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise APIError(400, f"'{where}' must be a string or a list of parts", param=where)
    out = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            out.append(part["text"])
        elif kind == "refusal":
            out.append(str(part.get("refusal", "")))
        else:
            raise APIError(
                400,
                f"content part type {kind!r} is not supported (text parts only)",
                param=f"{where}.{k}.type",
            )
    return "".join(out)


def _call(item: dict[str, Any], where: str) -> dict[str, Any]:
    for key in ("call_id", "name", "arguments"):
        if not isinstance(item.get(key), str):
            raise APIError(400, f"a function_call item needs '{key}'", param=f"{where}.{key}")
    fn = {"name": item["name"], "arguments": item["arguments"]}
    return {"id": item["call_id"], "type": "function", "function": fn}


def messages_of(req: ResponsesRequest) -> list[dict[str, Any]]:
    """The chat messages for `instructions` and `input`: function_call items join the
    assistant message before them (or make one) as tool_calls; function_call_output
    items become tool messages."""
    msgs: list[dict[str, Any]] = []
    if req.instructions:
        msgs.append({"role": "system", "content": req.instructions})
    if isinstance(req.input, str):
        return [*msgs, {"role": "user", "content": req.input}]
    for i, item in enumerate(req.input):
        where, kind = f"input.{i}", item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("system", "developer", "user", "assistant"):
                raise APIError(400, f"unknown message role {role!r}", param=f"{where}.role")
            msgs.append({"role": role, "content": _text(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            if not msgs or msgs[-1]["role"] != "assistant":
                msgs.append({"role": "assistant", "content": None})
            msgs[-1].setdefault("tool_calls", []).append(_call(item, where))
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, f"{where}.output")
            msgs.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
        elif kind != "reasoning":
            raise APIError(400, f"input item type {kind!r} is not supported", param=f"{where}.type")
    return msgs


def _tools(req: ResponsesRequest) -> list[dict[str, Any]] | None:
    if req.tools is None:
        return None
    out = []
    for k, tool in enumerate(req.tools):
        if tool.get("type") != "function":
            raise APIError(
                400,
                f"tool type {tool.get('type')!r} is not supported: only 'function' tools "
                "(the server's own tools come from its --tools file)",
                param=f"tools.{k}.type",
            )
        fn = {
            key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool
        }
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise APIError(400, f"tool_choice {choice!r} is not supported", param="tool_choice")


def _refuse_unserved(req: ResponsesRequest) -> None:
    if req.previous_response_id is not None:
        raise APIError(
            400,
            "'previous_response_id' is not supported: this server stores no responses; "
            "send the whole conversation in 'input'",
            param="previous_response_id",
        )
    if req.conversation is not None:
        raise APIError(
            400, "'conversation' is not supported (nothing is stored)", param="conversation"
        )
    if req.background:
        raise APIError(400, "'background' is not supported", param="background")


def chat_request(req: ResponsesRequest) -> ChatCompletionRequest:
    """The chat request a Responses request means; 400s name the Responses field."""
    _refuse_unserved(req)
    body: dict[str, Any] = {
        "model": req.model,
        "messages": messages_of(req),
        "tools": _tools(req),
        "tool_choice": _tool_choice(req.tool_choice),
        "max_completion_tokens": req.max_output_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "parallel_tool_calls": req.parallel_tool_calls,
        "user": req.user,
        "seed": req.seed,
        "cache_salt": req.cache_salt,
        "server_tools": req.server_tools,
    }
    fmt = (req.text or {}).get("format")
    if fmt is not None and fmt.get("type") != "text":
        if "response_format" not in ChatCompletionRequest.model_fields:
            raise APIError(400, f"text.format {fmt.get('type')!r} is not supported", param="text")
        body["response_format"] = _response_format(fmt)
    try:
        return ChatCompletionRequest.model_validate(
            {k: v for k, v in body.items() if v is not None}
        )
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(p) for p in e.get("loc", ()))
        where = loc.replace("messages", "input", 1)
        raise APIError(400, f"invalid value for '{where}': {e.get('msg')}", param=where) from None


def _response_format(fmt: dict[str, Any]) -> dict[str, Any]:
    """Responses' `text.format` as chat's `response_format`."""
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    return {"type": fmt.get("type")}
