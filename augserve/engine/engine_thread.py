"""The engine's own thread (`AsyncLLMEngine`, docs/design.md): steps and pieces of
the latency fit run there, one at a time, so that the event loop keeps serving
while the model computes (torch releases the GIL). The engine is not thread-safe:
while `busy`, the loop queues what it would do to the engine and applies it after.

Build the engine on that same thread (`new_engine_pool`, `on_pool`): torch's CPU
threads are an OpenMP team per thread that runs parallel work, and with two such
threads (the one that loaded and warmed the model, the one that steps it) libgomp
counts more threads than cores and stops spinning at its barriers, so every parallel
op waits on a futex: a 2-thread SmolLM2 decode step took 40 ms instead of 14.8
(docs/engine-quant.md, "One OpenMP team")."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

_T = TypeVar("_T")


def new_engine_pool() -> ThreadPoolExecutor:
    """The engine's one thread, before the engine exists: build it there (`on_pool`)."""
    return ThreadPoolExecutor(1, thread_name_prefix="augserve-engine")


def on_pool(pool: ThreadPoolExecutor, fn: Callable[[], _T]) -> _T:
    """`fn()` on `pool`'s thread, waited for (the server's start-up, before the loop)."""
    return pool.submit(fn).result()


class EngineThread:
    """A one-thread executor that nothing else uses (tools have their own,
    `server/tool_workers.py`): `pool`, the one the engine was built on, else a new one;
    `in_thread=False` runs each call on the loop instead."""

    def __init__(self, in_thread: bool = True, pool: ThreadPoolExecutor | None = None) -> None:
        self.in_thread = in_thread
        self.busy = False  # a call is running on the thread
        self._pool: ThreadPoolExecutor | None = pool
        self._inflight: asyncio.Future[Any] | None = None

    async def run(self, fn: Callable[[], _T]) -> _T:
        """`fn()` on the engine's thread. If the caller is cancelled meanwhile, `fn`
        still completes (`close` waits for it), and `busy` stays set until it has."""
        if not self.in_thread:
            return fn()
        if self._pool is None:
            self._pool = new_engine_pool()
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
