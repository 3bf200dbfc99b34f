"""ASGI middleware: the API keys (Bearer) on all but the open endpoints, the
request-body size limit and the body read and response write timeouts;
`TimedH11Protocol`, a read timeout on the request head (uvicorn has none), for
clients too slow to be served."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from augserve.server.errors import error_body
from augserve.server.stages import SCOPE_KEY, StageClock, clock_of
from augserve.server.tenancy import OPEN_PATHS, TENANT, tenant_of_key

log = logging.getLogger("augserve.server")

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
    """Every request but those to `OPEN_PATHS` (/health, /ping, /metrics, /version, as
    vLLM keeps them open) must carry `Authorization: Bearer <key>` with one of the
    keys (401 otherwise); the key's tenant goes into the scope (`server/tenancy.py`).
    Keys are compared by their SHA-256 digests, so no comparison reveals a prefix."""

    def __init__(self, app: ASGIApp, api_keys: Sequence[str]) -> None:
        self.app = app
        self.tenants = {_digest(k.encode()): tenant_of_key(k) for k in api_keys}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        if scope.get("method") == "OPTIONS":
            return await self.app(scope, receive, send)
        auth = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, token = auth.partition(b" ")
        tenant = self.tenants.get(_digest(token.strip())) if scheme.lower() == b"bearer" else None
        if tenant is None:
            msg = "missing API key" if not auth else "invalid API key"
            await send_error(
                send,
                401,
                f"{msg}: send 'Authorization: Bearer <key>'",
                {"www-authenticate": "Bearer"},
                code="invalid_api_key",
            )
            return None
        scope[TENANT] = tenant
        return await self.app(scope, receive, send)


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


class BodyLimitMiddleware:
    """Bodies over `max_bytes` get 413, by Content-Length or by counting a streamed
    body (which is read here in full, then handed on); a body whose next part takes
    more than `read_timeout` seconds gets 408. Sending a response part that waits more
    than `write_timeout` seconds (a client that stopped reading) ends the request.
    Once a request whose body had at least `large_body_bytes` is answered, `after_large`
    is called (the server's `native_memory.Trimmer.request`: its buffers back to the OS)."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        read_timeout: float = 30.0,
        write_timeout: float = 60.0,
        large_body_bytes: int | None = None,
        after_large: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout = read_timeout
        self.write_timeout = write_timeout
        self.large_body_bytes = large_body_bytes
        self.after_large = after_large

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await self._too_large(send)
        size = 0
        try:
            size = await self._serve(scope, receive, send)
        finally:
            large = self.large_body_bytes is not None and size >= self.large_body_bytes
            if large and self.after_large is not None:
                self.after_large()
        return None

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> int:
        """Reads the body, serves it; the number of body bytes read."""
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            try:
                async with asyncio.timeout(self.read_timeout):
                    msg = await receive()
            except TimeoutError:
                await send_error(
                    send, 408, f"the request body took over {self.read_timeout:g} s to arrive"
                )
                return size
            if msg["type"] != "http.request":  # the client left
                return size
            chunks.append(msg.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await self._too_large(send)
                return size
            more = bool(msg.get("more_body", False))
        clock_of(scope).mark("read")
        replayed = False
        gone = asyncio.Event()  # the client stopped reading: it is treated as gone

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await _unless(gone, receive)

        async def timed_send(message: Message) -> None:
            if gone.is_set():
                return
            try:
                async with asyncio.timeout(self.write_timeout):
                    await send(message)
            except TimeoutError:
                log.info("a client read nothing for %g s; its request is ended", self.write_timeout)
                gone.set()

        await self.app(scope, replay, timed_send)
        return size

    async def _too_large(self, send: Send) -> None:
        await send_error(send, 413, f"the request body is larger than {self.max_bytes} bytes")


async def _unless(gone: asyncio.Event, receive: Receive) -> Message:
    """The next message, or a disconnect once `gone` is set."""
    if gone.is_set():
        return {"type": "http.disconnect"}
    recv = asyncio.ensure_future(receive())
    wait = asyncio.ensure_future(gone.wait())
    try:
        done, _ = await asyncio.wait({recv, wait}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when the caller is cancelled (Starlette cancels its disconnect listener)
        for t in (recv, wait):
            t.cancel()
        await asyncio.shield(asyncio.gather(recv, wait, return_exceptions=True))
    if recv in done and not recv.cancelled():
        return recv.result()
    return {"type": "http.disconnect"}


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a read timeout on the request head: a connection
    that has not sent a whole request head `read_timeout` seconds after it opened
    (or after data of its next request began) gets 408 and is closed. uvicorn's
    `timeout_keep_alive` closes connections idle between requests."""

    read_timeout = 30.0  # set by `timed_protocol`

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._start_head_timer()
        self._opened: float | None = time.monotonic()  # the stage clock's `connected`
        self._head_at: float | None = None  # when the due request's head began

    def _start_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.read_timeout, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def data_received(self, data: bytes) -> None:
        if self.cycle is None or self.cycle.response_complete:  # a request head is due
            self._start_head_timer()
            if self._head_at is None:
                self._head_at = time.monotonic()
        before = self.cycle
        super().data_received(data)
        if self.cycle is not None and not self.cycle.response_complete:
            self._stop_head_timer()  # the head arrived (the body has its own timeout)
            if self.cycle is not before:  # a request began: its clock (`stages.py`)
                self._start_clock(self.cycle.scope)  # type: ignore[arg-type]

    def _start_clock(self, scope: Scope) -> None:
        clock = StageClock()
        if self._opened is not None:  # the connection's first request
            clock.mark("connected", self._opened)
        if self._head_at is not None:
            clock.mark("head", self._head_at)
        self._opened = self._head_at = None
        scope[SCOPE_KEY] = clock

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._stop_head_timer()  # idle now: the keep-alive timeout applies

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            )
            self.transport.close()


def timed_protocol(read_timeout: float) -> type[TimedH11Protocol]:
    return type("TimedH11Protocol", (TimedH11Protocol,), {"read_timeout": read_timeout})
