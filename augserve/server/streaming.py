"""Server-sent events and the usage object."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


def sse(obj: Any) -> str:
    """One SSE event holding `obj` as JSON."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage object; `cached_tokens`: prompt tokens the prefix cache held."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


class SSEResponse(StreamingResponse):
    """A `text/event-stream` response that stops as soon as its client leaves.

    Starlette cancels the sending task on a disconnect, but a cancellation can miss a
    task that never waits on a pending future (the engine hands it a token every
    iteration), so the stream also checks a flag between events. Either way the
    generator is closed at once, which aborts the requests behind it."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[str]) -> None:
        self.gone = False
        super().__init__(self._guarded(content), headers={"cache-control": "no-cache"})

    async def _guarded(self, content: AsyncIterator[str]) -> AsyncIterator[str]:
        async with aclosing(content) as events:  # type: ignore[type-var]
            async for event in events:
                if self.gone:
                    return
                yield event

    async def listen_for_disconnect(self, receive: Receive) -> None:
        await super().listen_for_disconnect(receive)
        self.gone = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()
