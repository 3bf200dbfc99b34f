"""ASGI middleware: the API key (Bearer) on /v1, and the request-body size limit."""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from augserve.server.errors import error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def send_error(
    send: Send,
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    code: str | None = None,
) -> None:
    body = json.dumps(error_body(status, message, code=code)).encode()
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    hdrs += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


class APIKeyMiddleware:
    """Requests under /v1 must carry `Authorization: Bearer <key>` (401 otherwise).
    /health and /metrics stay open, as in vLLM."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self.key = api_key.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1"):
            return await self.app(scope, receive, send)
        if scope.get("method") == "OPTIONS":
            return await self.app(scope, receive, send)
        auth = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, token = auth.partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self.key):
            msg = "missing API key" if not auth else "invalid API key"
            await send_error(
                send,
                401,
                f"{msg}: send 'Authorization: Bearer <key>'",
                {"www-authenticate": "Bearer"},
                code="invalid_api_key",
            )
            return None
        return await self.app(scope, receive, send)


class BodyLimitMiddleware:
    """Bodies over `max_bytes` get 413, by Content-Length or by counting a streamed
    body (which is read here in full, then handed on)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await self._too_large(send)
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":  # the client left
                return None
            chunks.append(msg.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                return await self._too_large(send)
            more = bool(msg.get("more_body", False))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    async def _too_large(self, send: Send) -> None:
        await send_error(send, 413, f"the request body is larger than {self.max_bytes} bytes")
