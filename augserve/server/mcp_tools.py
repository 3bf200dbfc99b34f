"""MCP servers as tool sources, through the official `mcp` package.

At start-up each configured server is connected (a stdio subprocess or a
streamable HTTP URL), its tools are found with `list_tools`, and each becomes a
server-side tool whose runner calls `call_tool`. The connection lives in the
caller's `AsyncExitStack` (the app's lifespan), so it is entered and left in the
same task, as anyio requires.
"""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from augserve.server.mcp_stdio import StderrTail, failure_message, stdio_transport
from augserve.server.tool_config import McpServerSpec
from augserve.server.tool_runners import Runner, ToolFailed


@dataclass(frozen=True)
class McpTool:
    name: str  # as the model sees it (the server's prefix + the remote name)
    remote_name: str
    description: str
    parameters: dict[str, Any]
    runner: Runner


def _content_text(result: Any) -> str:
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind == "resource" and hasattr(getattr(block, "resource", None), "text"):
            parts.append(str(block.resource.text))
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        return json.dumps(structured, ensure_ascii=False, default=str)
    return "\n".join(parts)


def _client(spec: McpServerSpec, errlog: Any = None) -> Any:
    """A client of the server; a stdio child runs as `mcp_stdio` says (`command: python`
    is this interpreter) with its stderr into `errlog`."""
    from mcp import Client

    if spec.url is not None:
        return Client(spec.url, read_timeout_seconds=spec.limits.timeout)
    return Client(stdio_transport(spec, errlog), read_timeout_seconds=spec.limits.timeout)


def _runner(client: Any, remote: str) -> Runner:
    async def run(arguments: dict[str, Any]) -> Any:
        result = await client.call_tool(remote, arguments)
        text = _content_text(result)
        if getattr(result, "is_error", False):
            raise ToolFailed(text or "the MCP tool reported an error")
        return text

    return run


async def connect_mcp(spec: McpServerSpec, stack: AsyncExitStack) -> list[McpTool]:
    """Connect one MCP server (kept open in `stack`) and return its tools."""
    stderr = StderrTail(spec.name) if spec.url is None else None
    try:
        client = await stack.enter_async_context(_client(spec, stderr and stderr.file))
        if stderr is not None:
            stderr.spawned()
        listed = await client.list_tools()
        if stderr is not None:
            stderr.connected()
    except Exception as exc:
        tail = stderr.tail() if stderr is not None else []
        raise ValueError(failure_message(spec, exc, tail)) from None
    tools = []
    for tool in listed.tools:
        if spec.tools is not None and tool.name not in spec.tools:
            continue
        schema = tool.input_schema
        if not isinstance(schema, dict):
            schema = schema.model_dump(by_alias=True, exclude_none=True)
        tools.append(
            McpTool(
                spec.prefix + tool.name,
                tool.name,
                tool.description or "",
                dict(schema) if schema else {"type": "object"},
                _runner(client, tool.name),
            )
        )
    missing = set(spec.tools or ()) - {t.remote_name for t in tools}
    if missing:
        raise ValueError(f"MCP server {spec.name!r} has no tools {sorted(missing)}")
    return tools
