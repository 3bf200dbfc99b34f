"""Runners for server-side tools: Python callables and HTTP endpoints (MCP: mcp_tools).

A runner is `async (arguments) -> Any`; `result_text` turns what it returned into
the text the model reads, or raises `BadResult` for garbage.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import typing
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from augserve.server.tool_config import HttpTarget
from augserve.server.tool_loops import ToolLoop
from augserve.server.tool_workers import ProcessWorkers, WorkerError, load_callable

__all__ = ["load_callable"]  # it lives with the worker processes, which need it too

Runner = Callable[[dict[str, Any]], Awaitable[Any]]


class BadResult(Exception):
    """A tool returned something that is not text or JSON."""


class ToolFailed(Exception):
    """A tool reported a failure (an HTTP error status, an MCP error result)."""


def result_text(value: Any, limit: int) -> str:
    """The text the model reads: strings as they are, JSON values serialized."""
    if isinstance(value, bytes | bytearray):
        try:
            text = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise BadResult("the tool returned bytes that are not UTF-8 text") from None
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError):
            raise BadResult(
                f"the tool returned a {type(value).__name__}, which is not text or JSON"
            ) from None
    text = text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")
    if len(text) > limit:
        text = f"{text[:limit]}... [cut: the result had {len(text)} characters]"
    return text


# --- Python callables ------------------------------------------------------------------
_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


def _json_type(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation) or annotation
    kind = _JSON_TYPES.get(origin)
    return {"type": kind} if kind else {}


def schema_from_signature(fn: Callable[..., Any]) -> dict[str, Any]:
    """A JSON schema for a function's keyword arguments, from its signature and hints."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    props: dict[str, Any] = {}
    required: list[str] = []
    extra = False
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            extra = True
            continue
        if p.kind is p.VAR_POSITIONAL or p.kind is p.POSITIONAL_ONLY:
            continue
        props[p.name] = _json_type(hints.get(p.name))
        if p.default is p.empty:
            required.append(p.name)
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    if not extra:
        schema["additionalProperties"] = False
    return schema


def python_runner(fn: Callable[..., Any], threads: Executor, loop: ToolLoop) -> Runner:
    """Async functions run on `loop` (the tool's own event loop, `tool_loops.py`),
    others on `threads` (the tool's own pool): never on the server's loop, never on the
    engine's thread. A call cancelled at its timeout returns at once; its thread or
    task is the tool's to lose, and what it returns later is dropped."""

    async def run(arguments: dict[str, Any]) -> Any:
        if inspect.iscoroutinefunction(fn):
            return await asyncio.wrap_future(loop.submit(fn, arguments))
        result = await asyncio.wrap_future(threads.submit(fn, **arguments))
        if inspect.isawaitable(result):  # a sync function that returned a coroutine
            result = await asyncio.wrap_future(loop.submit(_awaited, {"value": result}))
        return result

    return run


async def _awaited(value: Any) -> Any:
    return await value


def isolated_runner(workers: ProcessWorkers) -> Runner:
    """Each call in a worker process, killed if the call times out (`isolate: true`)."""

    async def run(arguments: dict[str, Any]) -> Any:
        try:
            return await workers.call(arguments)
        except WorkerError as exc:
            raise ToolFailed(f"raised {exc}") from None

    return run


# --- HTTP endpoints --------------------------------------------------------------------
class BadArgument(Exception):
    """An argument the tool cannot take (a path placeholder that would climb)."""


def path_segment(name: str, value: Any) -> str:
    """One `{name}` placeholder's value as a URL path segment: URL-quoted (it can never
    change the host), and refused when, URL-decoded (again and again), it holds a `/`
    or `\\`, is or holds `..`, or has a control character: the path cannot climb."""
    text = str(value)
    decoded, prev = text, None
    for _ in range(8):  # %252e%252e is %2e%2e is ..
        if decoded == prev:
            break
        prev, decoded = decoded, unquote(decoded)
    bad = next((c for c in decoded if ord(c) < 32 or ord(c) == 127), None)
    if "/" in decoded or "\\" in decoded or ".." in decoded or bad is not None:
        what = f"control character {bad!r}" if bad is not None else "'/', '\\' or '..'"
        raise BadArgument(f"argument {name!r} may not hold {what} (it fills a URL path)")
    return quote(text, safe="")


def build_url(target: HttpTarget, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Fill `{name}` path placeholders from the arguments (`path_segment`); returns the
    URL and the arguments left for the query or body."""
    rest = dict(arguments)
    url = target.url
    for name in list(rest):
        key = "{" + name + "}"
        if key in url:
            url = url.replace(key, path_segment(name, rest.pop(name)))
    if "{" in urlsplit(url).path:
        raise ToolFailed(f"the URL {target.url!r} needs arguments that were not given")
    host = (urlsplit(url).hostname or "").lower()
    if host not in target.allowed_hosts:  # cannot happen for a validated config
        raise ToolFailed(f"host {host!r} is not allowed")
    return url, rest


def http_runner(target: HttpTarget, client: Any) -> Runner:
    """GET/DELETE send the arguments as query parameters, other methods as a JSON body.
    Redirects are not followed (they could leave the allowed hosts)."""

    async def run(arguments: dict[str, Any]) -> Any:
        url, rest = build_url(target, arguments)
        headers = dict(target.headers)
        if target.method in ("GET", "DELETE"):
            params = {k: v if isinstance(v, str) else json.dumps(v) for k, v in rest.items()}
            resp = await client.request(target.method, url, params=params, headers=headers)
        else:
            resp = await client.request(target.method, url, json=rest, headers=headers)
        body = resp.content
        if resp.status_code >= 300:
            snippet = body[:500].decode("utf-8", "replace")
            raise ToolFailed(f"HTTP {resp.status_code} from {target.host}: {snippet}")
        return body

    return run
