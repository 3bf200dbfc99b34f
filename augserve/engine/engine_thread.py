"""The engine's own thread (`AsyncLLMEngine`, docs/design.md): steps and pieces of
the latency fit run there, one at a time, so that the event loop keeps serving
while the model computes (torch releases the GIL). The engine is not thread-safe:
while `busy`, the loop queues what it would do to the engine and applies it after."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

_T = TypeVar("_T")


class EngineThread:
    """A one-thread executor that nothing else uses (tools have their own,
    `server/tool_workers.py`); `in_thread=False` runs each call on the loop instead."""

    def __init__(self, in_thread: bool = True) -> None:
        self.in_thread = in_thread
        self.busy = False  # a call is running on the thread
        self._pool: ThreadPoolExecutor | None = None
        self._inflight: asyncio.Future[Any] | None = None

    async def run(self, fn: Callable[[], _T]) -> _T:
        """`fn()` on the engine's thread. If the caller is cancelled meanwhile, `fn`
        still completes (`close` waits for it), and `busy` stays set until it has."""
        if not self.in_thread:
            return fn()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="augserve-engine")
        self.busy = True
        loop = asyncio.get_running_loop()
        fut = asyncio.ensure_future(loop.run_in_executor(self._pool, fn))
        self._inflight = fut
        fut.add_done_callback(self._done)
        return await asyncio.shield(fut)

    def _done(self, _: object) -> None:
        self.busy = False

    async def close(self) -> None:
        """Wait for a call cut short by a cancel, then let the thread go."""
        if self._inflight is not None and not self._inflight.done():
            with contextlib.suppress(BaseException):
                await self._inflight
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
