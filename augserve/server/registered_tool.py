"""One server tool as the registry holds it (`RegisteredTool`: its definition, runner,
limits and argument validator) and one executed call (`ToolOutcome`); the registry:
`augserve/server/tool_registry.py`."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from augserve.server.tool_config import Limits
from augserve.server.tool_runners import Runner

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
    server: str | None = None  # the MCP server it comes from
    validator: Any = None
    semaphore: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.semaphore = asyncio.Semaphore(self.limits.max_concurrency)
        self.validator = _validator(self.name, self.parameters, strict=self.source != "mcp")

    def definition(self) -> dict[str, Any]:
        fn = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": fn}


def _validator(name: str, schema: dict[str, Any], strict: bool) -> Any:
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
    from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped]

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
