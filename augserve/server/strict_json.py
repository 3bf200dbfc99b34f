"""Request bodies parsed strictly, with errors that name the problem.

FastAPI answers a body that is not UTF-8, or nests too deep for Python's parser,
with "There was an error parsing the body". `StrictJSONRoute` parses the body
itself first: bad UTF-8 names its byte offset, nesting deeper than `MAX_DEPTH`
names the limit, and both are OpenAI error objects (400) like every other error.
A large body is parsed on a preparation thread (`server/preparation.py`): walking
a 2.5 MB body's 200,000 values takes a few hundred ms, which the event loop must
not spend.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute

from augserve.server.errors import APIError
from augserve.server.input_limits import check_body_counts

MAX_DEPTH = 64  # arrays/objects inside each other; tool schemas need a handful
INLINE_BYTES = 64 * 1024  # bodies up to this size are parsed on the event loop


def _depth(value: Any) -> int:
    """The deepest nesting of lists and dicts in `value`, level by level (no recursion;
    one pass over each level's values), stopping past `MAX_DEPTH`."""
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            return depth
        deeper: list[Any] = []
        for v in level:
            items = v.values() if isinstance(v, dict) else v
            deeper.extend(x for x in items if isinstance(x, dict | list))
        level = deeper
    return depth


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


class BodyError(HTTPException):
    """An `APIError` raised while the body is read (FastAPI passes HTTPExceptions on
    and turns anything else into a generic 400); the handler keeps param and code."""

    def __init__(self, err: APIError) -> None:
        super().__init__(err.status, err.message)
        self.param, self.code = err.param, err.code


def parse_and_check(body: bytes, limits: Any) -> Any:
    """The body's JSON value, its counts checked before validation (`input_limits`)."""
    value = parse_json_body(body)
    check_body_counts(value, limits)
    return value


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            state = getattr(self.scope["app"].state, "augserve", None)
            try:
                if state is None:
                    self._json = parse_json_body(body)
                elif len(body) > INLINE_BYTES:
                    limits = state.limits.prep
                    self._json = await state.preparer.run(parse_and_check, body, limits)
                else:
                    self._json = parse_and_check(body, state.limits.prep)
            except APIError as exc:
                raise BodyError(exc) from None
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose JSON body goes through `parse_json_body`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return route
