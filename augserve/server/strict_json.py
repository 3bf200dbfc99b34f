"""Request bodies parsed strictly, with errors that name the problem.

FastAPI answers a body that is not UTF-8, or nests too deep for Python's parser,
with "There was an error parsing the body". `StrictJSONRoute` parses the body
itself first: bad UTF-8 names its byte offset, nesting deeper than `MAX_DEPTH`
names the limit, and both are OpenAI error objects (400) like every other error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

MAX_DEPTH = 64  # arrays/objects inside each other; tool schemas need a handful


def _depth(value: Any) -> int:
    """The deepest nesting of lists and dicts in `value` (iterative: no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            return d
        stack.extend((x, d + 1) for x in v)
    return deepest


def parse_json_body(body: bytes) -> Any:
    """The JSON value of a request body; `HTTPException(400)` naming the problem.
    Malformed JSON raises `json.JSONDecodeError` (FastAPI's own message, with the
    position)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(
            400,
            f"the request body is not valid UTF-8 (byte 0x{body[exc.start]:02x} at offset "
            f"{exc.start}: {exc.reason})",
        ) from None
    try:
        value = json.loads(text)
    except RecursionError:
        value = None
        depth = MAX_DEPTH + 1
    else:
        depth = _depth(value)
    if depth > MAX_DEPTH:
        raise HTTPException(
            400, f"the request body nests arrays/objects deeper than the limit of {MAX_DEPTH}"
        )
    return value


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json_body(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose JSON body goes through `parse_json_body`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return route
