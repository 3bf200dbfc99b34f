"""A generic tools prompt, for chat templates that render no tools.

Some templates ignore the `tools` they are given (SmolLM2's GGUF template renders
`role` and `content` only: a request declaring a tool has the same prompt as one
without). A model served with such a template would have calls forced or parsed
blind, never having seen a tool's description or schema. As llama.cpp does, augserve
then writes the tools itself: a system block listing each offered tool's name,
description and JSON schema, and the call format the server's parser reads
(`generic_tools_messages`). Earlier assistant tool calls become that markup in
their message's content when the template does not render `tool_calls` either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

CALL_FORMATS = {
    "hermes": (
        "To call a function, write its name and arguments as a JSON object inside "
        "<tool_call></tool_call> tags, one block per call:\n"
        '<tool_call>\n{"name": "function name", "arguments": {"argument": "value"}}\n'
        "</tool_call>"
    ),
    "mistral": (
        "To call functions, write [TOOL_CALLS] followed by a JSON list of calls, each "
        "with its name and arguments:\n"
        '[TOOL_CALLS][{"name": "function name", "arguments": {"argument": "value"}}]'
    ),
    "llama3_json": (
        "To call a function, answer with only a JSON object holding its name and "
        "parameters:\n"
        '{"name": "function name", "parameters": {"argument": "value"}}'
    ),
}


def _tool_lines(tool: Mapping[str, Any]) -> str:
    fn = tool.get("function", tool)
    name = fn.get("name", "")
    lines = [f"- {name}"]
    if fn.get("description"):
        lines.append(f"  description: {fn['description']}")
    schema = fn.get("parameters") or {"type": "object", "properties": {}}
    lines.append(f"  parameters (JSON schema): {json.dumps(schema, ensure_ascii=False)}")
    return "\n".join(lines)


def tools_block(tools: Sequence[Mapping[str, Any]], call_format: str) -> str:
    """The system text offering `tools` (OpenAI tool definitions) in `call_format`
    (a parser name: hermes, mistral, llama3_json)."""
    if call_format not in CALL_FORMATS:
        raise ValueError(f"call_format must be one of {sorted(CALL_FORMATS)}, got {call_format!r}")
    head = "You can call the following functions to help with the request:"
    body = "\n".join(_tool_lines(t) for t in tools)
    tail = "If no function fits, answer in plain text."
    return f"{head}\n{body}\n\n{CALL_FORMATS[call_format]}\n{tail}"


def call_markup(calls: Sequence[Mapping[str, Any]], call_format: str) -> str:
    """Earlier tool calls (OpenAI `tool_calls`, arguments as objects or JSON strings)
    written the way `call_format` asks the model to write them."""
    objs = []
    for call in calls:
        fn = call.get("function", {})
        args = fn.get("arguments", {})
        if isinstance(args, str):
            args = json.loads(args) if args.strip() else {}
        key = "parameters" if call_format == "llama3_json" else "arguments"
        objs.append({"name": fn.get("name", ""), key: args})
    if call_format == "mistral":
        return "[TOOL_CALLS]" + json.dumps(objs, ensure_ascii=False)
    if call_format == "llama3_json":
        return "; ".join(json.dumps(o, ensure_ascii=False) for o in objs)
    return "\n".join(
        "<tool_call>\n" + json.dumps(o, ensure_ascii=False) + "\n</tool_call>" for o in objs
    )


def generic_tools_messages(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    call_format: str,
    render_calls: bool,
) -> list[dict[str, Any]]:
    """`messages` with the tools block merged into the leading system message (or a new
    one), and, unless the template renders `tool_calls` (`render_calls`), assistant
    tool calls written into their content."""
    out = [dict(m) for m in messages]
    if not render_calls:
        for m in out:
            if m.get("role") == "assistant" and m.get("tool_calls"):
                text = m.get("content") or ""
                markup = call_markup(m.pop("tool_calls"), call_format)
                m["content"] = f"{text}\n{markup}" if text else markup
    if tools:
        block = tools_block(tools, call_format)
        if out and out[0].get("role") == "system" and isinstance(out[0].get("content"), str):
            out[0]["content"] = f"{out[0]['content']}\n\n{block}"
        else:
            out.insert(0, {"role": "system", "content": block})
    return out
