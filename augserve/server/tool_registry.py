"""The server's tools by name: definitions for the chat template, and `run(call)`,
which validates the arguments against the tool's JSON schema, applies the tool's
concurrency limit and timeout, and never raises: a tool that fails, hangs or
returns garbage becomes an error result the model reads (`ToolOutcome.error`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from augserve.engine.tool_parsers import InvalidCall
from augserve.engine.tools import ParsedCall
from augserve.server.mcp_tools import connect_mcp
from augserve.server.tool_config import Limits, ToolsConfig, ToolSpec
from augserve.server.tool_runners import (
    BadResult,
    Runner,
    ToolFailed,
    http_runner,
    load_callable,
    python_runner,
    result_text,
    schema_from_signature,
)

log = logging.getLogger("augserve.server")


@dataclass
class ToolOutcome:
    """One executed call, for the model (`text`), the trace and the metrics."""

    name: str
    arguments: dict[str, Any]
    text: str
    error: str | None  # None, or a kind: unknown_tool, invalid_call, invalid_arguments,
    start: float  # timeout, exception, bad_result
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class RegisteredTool:
    name: str
    description: str
    parameters: dict[str, Any]
    runner: Runner
    limits: Limits
    source: str  # python | http | mcp
    validator: Any = None
    semaphore: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.semaphore = asyncio.Semaphore(self.limits.max_concurrency)
        self.validator = _validator(self.name, self.parameters, strict=self.source != "mcp")

    def definition(self) -> dict[str, Any]:
        fn = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": fn}


def _validator(name: str, schema: dict[str, Any], strict: bool) -> Any:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        if strict:
            msg = f"tool {name!r}: parameters is not a valid JSON schema: {exc.message}"
            raise ValueError(msg) from None
        log.warning("tool %r: its schema is not valid (%s); arguments are not checked", name, exc)
        return None
    return Draft202012Validator(schema)


def argument_error(validator: Any, arguments: dict[str, Any]) -> str | None:
    """The first schema violation, as one line naming where it is; None if valid."""
    if validator is None:
        return None
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
    if not errors:
        return None
    err = errors[0]
    where = "/".join(str(p) for p in err.path)
    return f"{where}: {err.message}" if where else err.message


class ToolRegistry:
    """Server-side tools from a `ToolsConfig`: Python and HTTP tools load at once, MCP
    servers connect in `start()` (inside the event loop that will call them)."""

    def __init__(self, config: ToolsConfig | None = None) -> None:
        self.config = config or ToolsConfig()
        self.tools: dict[str, RegisteredTool] = {}
        self.observers: list[Callable[[ToolOutcome], None]] = []
        self._stack = AsyncExitStack()
        self._http: Any = None
        for spec in self.config.tools:  # import errors and bad schemas surface here
            self._add(self._local(spec))

    # --- life ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect the MCP servers (local tools were loaded by the constructor)."""
        for mspec in self.config.mcp_servers:
            for t in await connect_mcp(mspec, self._stack):
                self._add(
                    RegisteredTool(
                        t.name, t.description, t.parameters, t.runner, mspec.limits, "mcp"
                    )
                )

    async def close(self) -> None:
        await self._stack.aclose()
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _add(self, tool: RegisteredTool) -> None:
        if tool.name in self.tools:
            raise ValueError(f"two tools are named {tool.name!r}")
        self.tools[tool.name] = tool

    def _local(self, spec: ToolSpec) -> RegisteredTool:
        if spec.python is not None:
            fn = load_callable(spec.python, self.config.module_path())
            params = spec.parameters or schema_from_signature(fn)
            desc = spec.description or (fn.__doc__ or "").strip().split("\n\n")[0]
            return RegisteredTool(spec.name, desc, params, python_runner(fn), spec.limits, "python")
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

    def definitions(self) -> list[dict[str, Any]]:
        return [t.definition() for t in self.tools.values()]

    # --- running ------------------------------------------------------------------------
    async def run(self, call: ParsedCall) -> ToolOutcome:
        """Run one call; never raises (cancellation aside)."""
        start = time.monotonic()
        kind, text = await self._run(call)
        out = ToolOutcome(call.name, dict(call.arguments), text, kind, start, time.monotonic())
        if kind is not None:
            out.text = f"Error: {text}"
        for observe in self.observers:
            observe(out)
        return out

    async def _run(self, call: ParsedCall) -> tuple[str | None, str]:
        if isinstance(call, InvalidCall):
            return "invalid_call", call.error
        tool = self.tools.get(call.name)
        if tool is None:
            return "unknown_tool", f"there is no tool named {call.name!r}"
        bad = argument_error(tool.validator, call.arguments)
        if bad is not None:
            return "invalid_arguments", f"invalid arguments for {call.name!r}: {bad}"
        async with tool.semaphore:
            try:
                async with asyncio.timeout(tool.limits.timeout):
                    value = await tool.runner(dict(call.arguments))
                return None, result_text(value, self.config.max_result_chars)
            except TimeoutError:
                return "timeout", f"{call.name!r} timed out after {tool.limits.timeout:g} s"
            except BadResult as exc:
                return "bad_result", f"{call.name!r}: {exc}"
            except ToolFailed as exc:
                return "exception", f"{call.name!r} failed: {exc}"
            except (Exception, SystemExit) as exc:  # a tool's sys.exit() must not stop us
                log.info("tool %r raised %s: %s", call.name, type(exc).__name__, exc)
                return "exception", f"{call.name!r} raised {type(exc).__name__}: {exc}"
