"""The server's tools by name: definitions for the chat template, and `run(call)`,
which validates the arguments against the tool's JSON schema, applies the tool's
concurrency limit and timeout, and never raises: a tool that fails, hangs or
returns garbage becomes an error result the model reads (`ToolOutcome.error`).

Sync Python tools run on their own thread pools (`ToolThreads`, one per tool, sized
by its `max_concurrency`), isolated ones in worker processes (`ProcessWorkers`);
MCP servers are supervised (`McpServer`: reconnected with backoff, their tool
lists refreshed on every reconnection).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from augserve.engine.tool_parsers import InvalidCall
from augserve.engine.tools import ParsedCall
from augserve.server.mcp_tools import McpServer, McpTool
from augserve.server.registered_tool import RegisteredTool, ToolOutcome, argument_error
from augserve.server.tool_checks import check_loaded
from augserve.server.tool_config import ToolsConfig, ToolSpec
from augserve.server.tool_loops import ToolLoop
from augserve.server.tool_runners import (
    BadArgument,
    BadResult,
    ToolFailed,
    http_runner,
    isolated_runner,
    load_callable,
    python_runner,
    result_text,
    schema_from_signature,
)
from augserve.server.tool_workers import ProcessWorkers, ToolRaised, ToolThreads

log = logging.getLogger("augserve.server")
OFFER_MODES = ("request", "always")  # --offer-server-tools: which requests see a server tool


class ToolRegistry:
    """Server-side tools from a `ToolsConfig`: Python and HTTP tools load at once, MCP
    servers connect in `start()` (inside the event loop that will call them).

    `offer`: "request" (a tool is offered only to the requests that ask for it, by
    declaring its name in `tools` or listing it in `server_tools`) or "always" (every
    tool in every request's prompt, whatever it asks)."""

    def __init__(self, config: ToolsConfig | None = None, offer: str = "request") -> None:
        if offer not in OFFER_MODES:
            raise ValueError(f"offer must be one of {OFFER_MODES}, got {offer!r}")
        self.config = config or ToolsConfig()
        self.offer = offer
        self.tools: dict[str, RegisteredTool] = {}
        self.observers: list[Callable[[ToolOutcome], None]] = []
        self.mcp_servers: dict[str, McpServer] = {}
        self.threads: dict[str, ToolThreads] = {}  # python tools' thread pools (sync) ...
        self.loops: dict[str, ToolLoop] = {}  # ... and event loops (async)
        self.workers: dict[str, ProcessWorkers] = {}  # isolated tools' processes
        self._http: Any = None
        for spec in self.config.tools:  # import errors and bad schemas surface here
            self._add(self._local(spec))

    # --- life ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect the MCP servers (local tools were loaded by the constructor) and start
        one worker process per isolated tool."""
        for mspec in self.config.mcp_servers:
            server = McpServer(mspec, self._mcp_tools)
            self.mcp_servers[mspec.name] = server
            await server.start()
        for workers in self.workers.values():
            await workers.warm()

    async def close(self, timeout: float = 5.0) -> None:
        """Close everything; an MCP server that takes more than `timeout` seconds to
        close is abandoned (the shutdown stays bounded whatever a tool does)."""
        for server in self.mcp_servers.values():
            try:
                await within(server.close(), timeout)
            except TimeoutError:
                log.warning(
                    "MCP server %r did not close in %g s; left behind", server.name, timeout
                )
        for workers in self.workers.values():
            await workers.close()
        for threads in self.threads.values():
            threads.shutdown(wait=False)
        for loop in self.loops.values():
            loop.close()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def kill_workers(self) -> None:
        """Kill the isolated tools' worker processes at once (a forced exit)."""
        for workers in self.workers.values():
            workers.kill_now()

    def server_states(self) -> dict[str, str]:
        """Each MCP server's state: connecting, up, down or closed."""
        return {name: s.state for name, s in self.mcp_servers.items()}

    def _mcp_tools(self, server: McpServer, tools: list[McpTool]) -> None:
        """A (re)connected server's tool list replaces the one it had."""
        old = {n for n, t in self.tools.items() if t.server == server.name}
        for t in tools:
            have = self.tools.get(t.name)
            if have is not None and have.server != server.name:
                log.warning(
                    "MCP server %r: tool %r clashes with another; skipped", server.name, t.name
                )
                continue
            old.discard(t.name)
            if have is not None and have.parameters == t.parameters:
                have.description, have.runner = t.description, t.runner
                continue
            self.tools[t.name] = RegisteredTool(
                t.name,
                t.description,
                t.parameters,
                t.runner,
                server.spec.limits,
                "mcp",
                server.name,
            )
        for name in old:  # gone from the server's list
            del self.tools[name]

    def _add(self, tool: RegisteredTool) -> None:
        if tool.name in self.tools:
            raise ValueError(f"two tools are named {tool.name!r}")
        self.tools[tool.name] = tool

    def _local(self, spec: ToolSpec) -> RegisteredTool:
        if spec.python is not None:
            fn = load_callable(spec.python, self.config.module_path())
            if not self.config.allow_unsafe:
                check_loaded(fn, spec.python, f"tool {spec.name!r}")
            params = spec.parameters or schema_from_signature(fn)
            desc = spec.description or (fn.__doc__ or "").strip().split("\n\n")[0]
            if spec.isolate:
                workers = self.workers[spec.name] = ProcessWorkers(
                    spec.python, spec.limits.max_concurrency
                )
                runner = isolated_runner(workers)
            else:
                conc, label = spec.limits.max_concurrency, f"tool-{spec.name}"
                threads = self.threads[spec.name] = ToolThreads(conc, label)
                loop = self.loops[spec.name] = ToolLoop(conc, f"{label}-loop")
                runner = python_runner(fn, threads, loop)
            return RegisteredTool(spec.name, desc, params, runner, spec.limits, "python")
        assert spec.http is not None
        if self._http is None:
            import httpx

            self._http = httpx.AsyncClient(follow_redirects=False)
        runner = http_runner(spec.http, self._http)
        params = spec.parameters or {"type": "object"}
        return RegisteredTool(spec.name, spec.description, params, runner, spec.limits, "http")

    # --- lookups ------------------------------------------------------------------------
    def names(self) -> frozenset[str]:
        return frozenset(self.tools)

    def definitions(self, names: frozenset[str] | None = None) -> list[dict[str, Any]]:
        """The tools' definitions, in the file's order (only `names`, if given)."""
        return [t.definition() for n, t in self.tools.items() if names is None or n in names]

    # --- running ------------------------------------------------------------------------
    async def run(self, call: ParsedCall, allowed: frozenset[str] | None = None) -> ToolOutcome:
        """Run one call; never raises (cancellation aside). `allowed`: the names this
        request was offered (None: all); a call to another is an unknown tool."""
        start = time.monotonic()
        kind, text = await self._run(call, allowed)
        out = ToolOutcome(call.name, dict(call.arguments), text, kind, start, time.monotonic())
        if kind is not None:
            out.text = f"Error: {text}"
        for observe in self.observers:
            observe(out)
        return out

    async def _run(
        self, call: ParsedCall, allowed: frozenset[str] | None
    ) -> tuple[str | None, str]:
        if isinstance(call, InvalidCall):
            return "invalid_call", call.error
        tool = self.tools.get(call.name) if allowed is None or call.name in allowed else None
        if tool is None:
            return "unknown_tool", f"there is no tool named {call.name!r}"
        bad = argument_error(tool.validator, call.arguments)
        if bad is not None:
            return "invalid_arguments", f"invalid arguments for {call.name!r}: {bad}"
        async with tool.semaphore:
            try:
                value = await within(tool.runner(dict(call.arguments)), tool.limits.timeout)
                return None, result_text(value, self.config.max_result_chars)
            except TimeoutError:
                return "timeout", f"{call.name!r} timed out after {tool.limits.timeout:g} s"
            except BadArgument as exc:
                return "invalid_arguments", f"invalid arguments for {call.name!r}: {exc}"
            except BadResult as exc:
                return "bad_result", f"{call.name!r}: {exc}"
            except ToolFailed as exc:
                return "exception", f"{call.name!r} failed: {exc}"
            except ToolRaised as exc:
                log.info("tool %r raised %s", call.name, exc)
                return "exception", f"{call.name!r} raised {exc}"
            except (Exception, SystemExit, KeyboardInterrupt) as exc:  # they must not stop us
                log.info("tool %r raised %s: %s", call.name, type(exc).__name__, exc)
                return "exception", f"{call.name!r} raised {type(exc).__name__}: {exc}"


async def within(work: Awaitable[Any], timeout: float) -> Any:
    """`work`'s result, or TimeoutError at `timeout` seconds whatever `work` does: it
    runs as a task of its own, cancelled at the deadline and abandoned there (a runner
    that swallows the cancellation goes on alone; what it returns is dropped)."""
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        task.add_done_callback(_drop)
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_drop)
        raise TimeoutError
    return task.result()


def _drop(task: asyncio.Future[Any]) -> None:
    """Read an abandoned call's outcome, so that asyncio does not log it as lost."""
    if not task.cancelled():
        task.exception()
