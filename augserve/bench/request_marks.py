"""Server-side times of each benchmark request, read the same way on any ASGI server.

A benchmark client judges a request by when it saw the first and the last token. On a
small machine the client's own process stalls now and then (a micro-VM's CPUs are
sometimes not running at all: docs/results-vllm-plugin.md, "The first token's path"), and a
stall lands on whichever request is between its connection and its body at that
moment; the server with more requests in flight takes more of them. `RequestMarks`
reads the times where the server sees them, identically on both servers of a
comparison: it is an ASGI middleware that `vllm serve --middleware` and
`augserve serve --middleware` both load by its import path,
`augserve.bench.request_marks.RequestMarks`.

For every HTTP request carrying the `x-request-marks-id` header it keeps three
`time.monotonic()` marks (on Linux one clock for every process of the machine, so the
client can set them against its own start):

- `body`: the request's body fully received (the server can begin);
- `first`: the first response chunk carrying a generated token (a non-empty
  `token_ids`, `text` or `content` in its JSON: a chat stream's empty role chunk is
  not a token) handed to the server's transport;
- `last`: the last response chunk handed over (both marked before the write, so a
  client slow to read does not move them).

`GET /request-marks` answers the marks taken since the last read, as JSON
`{id: {"body": t, "first": t, "last": t}}`, and forgets them. Memory is bounded: past
`MAX_MARKS` ids the oldest are dropped. It imports nothing outside the standard
library, so it loads in vLLM's environment as in ours; it changes no request and no
answer, and a request without the header passes through untouched.
"""

from __future__ import annotations

import json
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

HEADER = b"x-request-marks-id"
PATH = "/request-marks"
MAX_MARKS = 100_000
MAX_ID_BYTES = 200
# a generated token in a response chunk: completions' `token_ids` (not `prompt_token_ids`:
# the key's opening quote is part of the pattern), `text`, or chat's `content`
_TOKEN = re.compile(rb'"token_ids"\s*:\s*\[\s*\d|"(?:text|content)"\s*:\s*"[^"]')


def carries_token(body: bytes) -> bool:
    """Whether a response chunk holds at least one generated token."""
    return _TOKEN.search(body) is not None


class MarkStore:
    """The marks of the requests seen, oldest first, at most `limit` ids."""

    def __init__(self, limit: int = MAX_MARKS) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit = limit
        self.marks: OrderedDict[str, dict[str, float]] = OrderedDict()

    def mark(self, key: str, name: str, first_only: bool = False) -> None:
        entry = self.marks.get(key)
        if entry is None:
            entry = self.marks[key] = {}
            while len(self.marks) > self.limit:
                self.marks.popitem(last=False)
        if not (first_only and name in entry):
            entry[name] = time.monotonic()

    def take(self) -> dict[str, dict[str, float]]:
        """Every mark so far, forgotten once read."""
        out = dict(self.marks)
        self.marks.clear()
        return out


class RequestMarks:
    """The ASGI middleware (see the module doc)."""

    def __init__(self, app: ASGIApp, limit: int = MAX_MARKS) -> None:
        self.app = app
        self.store = MarkStore(limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] == PATH and scope.get("method") == "GET":
            return await self._answer(send)
        key = _key(scope)
        if key is None:
            return await self.app(scope, receive, send)
        store = self.store

        async def receive_marked() -> Message:
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                store.mark(key, "body", first_only=True)
            return message

        async def send_marked(message: Message) -> None:
            # marked as the server hands the chunk over, before a slow reader can hold
            # the send back: what the server did, not when the client took it
            if message["type"] == "http.response.body":
                if carries_token(message.get("body", b"")):
                    store.mark(key, "first", first_only=True)
                store.mark(key, "last")
            await send(message)

        await self.app(scope, receive_marked, send_marked)

    async def _answer(self, send: Send) -> None:
        body = json.dumps(self.store.take()).encode()
        headers = [(b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode())]  # fmt: skip
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _key(scope: Scope) -> str | None:
    for name, value in scope.get("headers") or []:
        if name == HEADER:
            return bytes(value[:MAX_ID_BYTES]).decode("latin-1")
    return None
