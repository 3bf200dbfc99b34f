"""OpenAI's error object for every 4xx/5xx, and the handlers that produce it."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("augserve.server")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    503: "service_unavailable",
}


class APIError(Exception):
    """Raised by handlers; becomes `{"error": {...}}` with its status."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(
            status, "server_error" if status >= 500 else "invalid_request_error"
        )


def error_body(
    status: int,
    message: str,
    param: str | None = None,
    code: str | None = None,
    type: str | None = None,
) -> dict[str, Any]:
    err = APIError(status, message, param, code, type)
    return {"error": {"message": message, "type": err.type, "param": param, "code": code}}


def error_response(err: APIError) -> Response:
    """ASCII JSON: a message may quote client text that is not valid Unicode."""
    body = {
        "error": {"message": err.message, "type": err.type, "param": err.param, "code": err.code}
    }
    return Response(json.dumps(body), status_code=err.status, media_type="application/json")


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "body"}


def _is_field(part: Any) -> bool:
    """A field name or an index in an error location (not pydantic's union tags such as
    'constrained-str' or 'list[int]')."""
    if isinstance(part, int):
        return True
    return isinstance(part, str) and part.isidentifier() and part not in _TYPE_TAGS


def validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    e = errors[0]
    loc = [str(p) for p in e.get("loc", ()) if _is_field(p)]
    if e.get("type") == "json_invalid":
        return f"the request body is not valid JSON ({e.get('msg', '')})", None
    param = ".".join(loc) or None
    msg = str(e.get("msg", "invalid value"))
    if param is None:
        return f"invalid request body: {msg}", None
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"invalid value for '{param}': {msg}{more}", param


def install_error_handlers(app: FastAPI) -> None:
    async def on_api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, APIError)
        return error_response(exc)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        msg, param = validation_message(exc)
        return error_response(APIError(400, msg, param))

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        msg = str(exc.detail) if exc.detail else "error"
        if exc.status_code == 404:
            msg = f"no route {request.method} {request.url.path}"
        param, code = getattr(exc, "param", None), getattr(exc, "code", None)
        resp = error_response(APIError(exc.status_code, msg, param, code))
        for k, v in (exc.headers or {}).items():
            resp.headers[k] = v
        return resp

    async def on_crash(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(APIError(500, f"internal error: {type(exc).__name__}"))

    app.add_exception_handler(APIError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_crash)
