"""Request bodies parsed strictly, with errors that name the problem.

FastAPI answers a body that is not UTF-8, or nests too deep for Python's parser,
with "There was an error parsing the body". `StrictJSONRoute` parses the body
itself first: bad UTF-8 names its byte offset, nesting deeper than `MAX_DEPTH`
names the limit, and both are OpenAI error objects (400) like every other error.

A large body (over `INLINE_BYTES`; the size limit's 413 came before it was read,
`middleware.BodyLimitMiddleware`) is parsed, counted and validated into the route's
request model on a preparation thread (`server/preparation.py`): walking a 2.5 MB
body's 200,000 values, or validating 40,000 messages (170 ms), is time the event
loop must not spend. Validation holds the GIL for as long as one pydantic call
runs, so the long lists of models (`messages`, `tools`) are validated `PIECE`
items at a time (`validate_in_pieces`): between pieces the loop gets the GIL back,
and /health answers (docs/design.md, the server's layers).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError

from augserve.server.errors import APIError, validation_message
from augserve.server.input_limits import check_body_counts

MAX_DEPTH = 64  # arrays/objects inside each other; tool schemas need a handful
INLINE_BYTES = 64 * 1024  # bodies up to this size are parsed and validated on the loop
PIECE = 256  # list items validated in one pydantic call off the loop


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


def parse_json_body(body: bytes, counts: Callable[[Any], None] | None = None) -> Any:
    """The JSON value of a request body; `HTTPException(400)` naming the problem.
    Malformed JSON raises `json.JSONDecodeError` (FastAPI's own message, with the
    position). `counts` checks the value before its depth is walked (the cheaper
    check first: 2,000 tools are refused without walking them)."""
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
        if counts is not None:
            counts(value)
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
    return parse_json_body(body, lambda value: check_body_counts(value, limits))


_ADAPTERS: dict[tuple[type[BaseModel], str], TypeAdapter[Any]] = {}


def _model_lists(model: type[BaseModel]) -> list[tuple[str, TypeAdapter[Any]]]:
    """(body key, adapter) of `model`'s fields that are lists of models."""
    out = []
    for name, info in model.model_fields.items():
        ann = info.annotation
        args = getattr(ann, "__args__", ())
        if getattr(ann, "__origin__", None) is not list:  # `list[M] | None`: the list arm
            ann = next((a for a in args if getattr(a, "__origin__", None) is list), None)
        item = getattr(ann, "__args__", (None,))[0] if ann is not None else None
        if isinstance(item, type) and issubclass(item, BaseModel):
            key = (model, name)
            if key not in _ADAPTERS:
                _ADAPTERS[key] = TypeAdapter(list[item])  # type: ignore[valid-type]
            out.append((info.alias or name, _ADAPTERS[key]))
    return out


def validate_in_pieces(model: type[BaseModel], value: Any) -> BaseModel:
    """`value` validated into `model`, its long lists of models `PIECE` items per
    pydantic call (the GIL passes between calls), then the whole request, whose
    validated items pass as they are. A bad item: the request is validated with
    that list's unvalidated rest, so the errors are FastAPI's (`BodyError`, 400)."""
    data = dict(value) if isinstance(value, dict) else value
    try:
        for key, adapter in _model_lists(model) if isinstance(data, dict) else []:
            items = data.get(key)
            if not isinstance(items, list) or len(items) <= PIECE:
                continue
            done: list[Any] = []
            try:
                for at in range(0, len(items), PIECE):
                    done += adapter.validate_python(items[at : at + PIECE])
            except ValidationError:
                data[key] = done + items[len(done) :]
                break
            data[key] = done
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        msg, param = validation_message(RequestValidationError(errors))
        raise BodyError(APIError(400, msg, param)) from None


def parse_and_validate(body: bytes, limits: Any, model: type[BaseModel] | None) -> Any:
    """Off the loop: the body parsed, counted, and validated into `model` (if given)."""
    value = parse_and_check(body, limits)
    return value if model is None else validate_in_pieces(model, value)


class StrictJSONRequest(Request):
    body_model: type[BaseModel] | None = None  # the route's request model

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            state = getattr(self.scope["app"].state, "augserve", None)
            try:
                if state is None:
                    self._json = parse_json_body(body)
                elif len(body) > INLINE_BYTES:  # FastAPI takes a validated model as it is
                    args = (body, state.limits.prep, self.body_model)
                    self._json = await state.preparer.run(parse_and_validate, *args)
                else:
                    self._json = parse_and_check(body, state.limits.prep)
            except APIError as exc:
                raise BodyError(exc) from None
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose JSON body goes through `parse_json_body`, and whose large bodies
    are validated off the event loop (module doc)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        field = getattr(self, "body_field", None)
        model = field.field_info.annotation if field is not None else None
        body_model = model if isinstance(model, type) and issubclass(model, BaseModel) else None

        async def route(request: Request) -> Response:
            req = StrictJSONRequest(request.scope, request.receive)
            req.body_model = body_model
            return await handler(req)

        return route
