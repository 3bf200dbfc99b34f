"""MCP servers as tool sources, through the official `mcp` package, supervised.

Each configured server (a stdio subprocess or a streamable HTTP URL) gets one
`McpServer`: a task that connects, lists the tools (each becomes a server-side
tool whose runner calls `call_tool`), then watches the connection. A call that
finds the connection closed, or a failed probe (`list_tools` every
`probe_interval` seconds), marks it down; the task reconnects with exponential
backoff (0.5 s doubling to 30 s) and refreshes the tool list. While a server is
down its tools answer the model at once with an error naming the server.

A failed call answers the model with the MCP server's own error text (at most
`ERROR_CHARS`), and logs one line. For a tool that crashed, the MCP SDK sends only
"Error executing tool X" and prints the traceback on the server's stderr; for a
stdio server augserve folds that traceback into one line and adds its exception
to the text the model gets (`mcp_stdio.TracebackFolder`).

The connection is entered and left inside the supervising task, as anyio
requires. The first connection happens in `start()`: a server that cannot be
reached at start-up is a configuration error and stops the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from asyncio import FIRST_COMPLETED
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from augserve.server.mcp_stdio import StderrTail, failure_message, stdio_transport
from augserve.server.tool_config import McpServerSpec
from augserve.server.tool_runners import Runner, ToolFailed

log = logging.getLogger("augserve.server")

BACKOFF_MIN = 0.5  # seconds before the first reconnect; doubled after each failed one
BACKOFF_MAX = 30.0
PROBE_INTERVAL = 10.0  # seconds between liveness probes of an idle connection
ERROR_CHARS = 2000  # at most this much of a failed call's error text reaches the model


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
        return Client(spec.url, read_timeout_seconds=spec.limits.timeout, cache=None)
    transport = stdio_transport(spec, errlog)
    return Client(transport, read_timeout_seconds=spec.limits.timeout, cache=None)


def _closed(exc: BaseException) -> bool:
    """Whether an error from `call_tool` means the connection is gone (else it is the
    tool's or the request's own error)."""
    from mcp.shared.exceptions import MCPError
    from mcp.types import CONNECTION_CLOSED

    return not isinstance(exc, MCPError) or exc.code == CONNECTION_CLOSED


class McpServer:
    """One supervised MCP server. `state`: connecting, up, down or closed.
    `on_tools(server, tools)` is called with the tool list at every (re)connection."""

    def __init__(
        self,
        spec: McpServerSpec,
        on_tools: Callable[[McpServer, list[McpTool]], None],
        probe_interval: float = PROBE_INTERVAL,
    ) -> None:
        self.spec = spec
        self.on_tools = on_tools
        self.probe_interval = probe_interval
        self.state = "connecting"
        self.connects = 0  # successful connections (1 + reconnections)
        self.last_error: str | None = None
        self._client: Any = None
        self._stderr: StderrTail | None = None  # a stdio child's stderr (its tracebacks)
        self._broken = asyncio.Event()
        self._stop = asyncio.Event()
        self._first: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def where(self) -> str:
        return self.spec.url or " ".join([self.spec.command or "", *self.spec.args])

    async def start(self) -> None:
        """Connect once (ValueError if that fails), then supervise in a task."""
        self._first = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._supervise(), name=f"mcp-{self.name}")
        try:
            await self._first
        except ValueError as exc:
            await self._task
            raise ValueError(str(exc)) from None

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
        self.state = "closed"

    # --- calls -----------------------------------------------------------------------------
    def runner(self, remote: str) -> Runner:
        async def run(arguments: dict[str, Any]) -> Any:
            return await self.call(remote, arguments)

        return run

    async def call(self, remote: str, arguments: dict[str, Any]) -> str:
        client = self._client
        if client is None or self.state != "up":
            why = f" ({self.last_error})" if self.last_error else ""
            raise ToolFailed(f"the MCP server {self.name!r} is down{why}; it is reconnecting")
        seen = self._stderr.folder.count if self._stderr is not None else 0
        try:
            result = await client.call_tool(remote, arguments)
        except Exception as exc:
            if not _closed(exc):
                raise self._failed(remote, str(exc)) from None
            self._mark_down(f"{type(exc).__name__}: {exc}")
            raise self._failed(
                remote, f"the MCP server {self.name!r} went away ({exc}); reconnecting"
            ) from None
        text = _content_text(result)
        if getattr(result, "is_error", False):
            text = text or "the MCP tool reported an error"
            if text.strip() == f"Error executing tool {remote}":  # the SDK hid the cause
                text += await self._logged_cause(seen)
            raise self._failed(remote, text)
        return text

    def _failed(self, remote: str, text: str) -> ToolFailed:
        """The error the model gets (at most ERROR_CHARS), logged in one line."""
        if len(text) > ERROR_CHARS:
            text = text[:ERROR_CHARS] + f"... ({len(text) - ERROR_CHARS} more characters)"
        log.warning("MCP tool %r of %r failed: %s", remote, self.name, " ".join(text.split()))
        return ToolFailed(text)

    async def _logged_cause(self, seen: int, wait: float = 1.0) -> str:
        """': <exception>' from the traceback the server printed for this call (its
        stderr; a crash's text never reaches the client), or '' if none came."""
        tail = self._stderr
        if tail is None:
            return ""
        for _ in range(int(wait / 0.02)):  # the traceback comes through another pipe
            if tail.folder.count > seen:
                new = tail.folder.count - seen
                return ": " + list(tail.folder.errors)[-min(new, len(tail.folder.errors))]
            await asyncio.sleep(0.02)
        return ""

    def _mark_down(self, why: str) -> None:
        if self.state == "up":
            self.state = "down"
            self.last_error = why
        self._broken.set()

    # --- supervision -----------------------------------------------------------------------
    async def _supervise(self) -> None:
        delay = BACKOFF_MIN
        while not self._stop.is_set():
            stderr = StderrTail(self.name) if self.spec.url is None else None
            self._stderr = stderr
            try:
                async with _client(self.spec, stderr and stderr.file) as client:
                    if stderr is not None:
                        stderr.spawned()
                    tools = await self._tools(client)
                    if stderr is not None:
                        stderr.connected()
                    self._client, self.state, self.last_error = client, "up", None
                    self.connects += 1
                    delay = BACKOFF_MIN
                    self._broken.clear()
                    self.on_tools(self, tools)
                    if self.connects > 1:
                        log.info("MCP server %r reconnected (%d tools)", self.name, len(tools))
                    if self._first is not None and not self._first.done():
                        self._first.set_result(None)
                    await self._watch(client)
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                if self._first is not None and not self._first.done():
                    tail = stderr.tail() if stderr is not None else []
                    self._first.set_exception(ValueError(failure_message(self.spec, exc, tail)))
                    return
            finally:
                self._client = None
                if stderr is not None:
                    stderr.spawned()  # our end of the pipe closes: it ends with the child
            if self._stop.is_set():
                return
            self.state = "down"
            log.warning(
                "MCP server %r is down (%s); reconnecting in %.1f s",
                self.name,
                self.last_error,
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            delay = min(2 * delay, BACKOFF_MAX)

    async def _watch(self, client: Any) -> None:
        """Until the connection breaks (a call saw it, or a probe failed) or `close()`."""
        while True:
            stop = asyncio.ensure_future(self._stop.wait())
            broken = asyncio.ensure_future(self._broken.wait())
            try:
                await asyncio.wait(
                    {stop, broken}, timeout=self.probe_interval, return_when=FIRST_COMPLETED
                )
            finally:  # also when close() cancels this task
                for t in (stop, broken):
                    t.cancel()
                await asyncio.shield(asyncio.gather(stop, broken, return_exceptions=True))
            if self._stop.is_set() or self._broken.is_set():
                return
            try:
                async with asyncio.timeout(self.spec.limits.timeout):
                    self.on_tools(self, await self._tools(client))
            except Exception as exc:
                self._mark_down(f"probe failed: {type(exc).__name__}: {exc}")
                return

    async def _tools(self, client: Any) -> list[McpTool]:
        spec = self.spec
        listed = await client.list_tools()
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
                    self.runner(tool.name),
                )
            )
        missing = set(spec.tools or ()) - {t.remote_name for t in tools}
        if missing:
            raise ValueError(f"MCP server {spec.name!r} has no tools {sorted(missing)}")
        return tools
