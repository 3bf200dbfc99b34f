"""Where async Python tools run: on an event loop of their own, never the server's.

Each async tool gets a `ToolLoop`: a daemon thread running its own asyncio loop. A
call is submitted to it and awaited from the server's loop through a concurrent
future, so

- a tool that blocks its loop (`time.sleep` in an `async def`) blocks only its own
  tool's loop, never the server's (`/health` still answers);
- the deadline is the server's: at the timeout the server stops waiting at once and
  cancels the tool's task. A tool that swallows the `CancelledError` and goes on is
  abandoned: its late result is dropped, never read (the model got a timeout
  error). While abandoned calls run on, they hold the tool's `max_concurrency`
  slots (`_guarded`), so a tool that never ends costs at most that many tasks.
- whatever a tool raises that is not an `Exception` (KeyboardInterrupt, SystemExit,
  a CancelledError it raised itself) comes back as `ToolRaised`, an error answer: it
  never reaches the server's loop, whose signal handling and shutdown stay as they
  are.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from augserve.server.tool_workers import ToolRaised


class ToolLoop:
    """One daemon thread running an asyncio loop for one async tool; `submit` runs a
    call there and returns a concurrent future (cancel it to abandon the call)."""

    def __init__(self, max_concurrency: int, name: str = "augserve-tool-loop") -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.max_concurrency = max_concurrency
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: asyncio.Semaphore | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.running = 0  # calls whose coroutine has started and not ended (abandoned too)

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self.name} is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(
                    target=self._run, args=(loop, ready), name=self.name, daemon=True
                )
                thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def _run(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        self._slots = asyncio.Semaphore(self.max_concurrency)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.close()

    def submit(
        self, fn: Callable[..., Coroutine[Any, Any, Any] | Any], kwargs: dict[str, Any]
    ) -> cf.Future[Any]:
        loop = self._ensure()
        return asyncio.run_coroutine_threadsafe(self._guarded(fn, kwargs), loop)

    async def _guarded(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
        assert self._slots is not None
        async with self._slots:
            self.running += 1
            try:
                value = fn(**kwargs)
                if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
                    value = await value
                return value
            except (Exception, GeneratorExit):
                raise
            except asyncio.CancelledError as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # our own cancellation (the deadline): the call is over
                raise ToolRaised(exc) from None  # one the tool raised itself
            except BaseException as exc:
                raise ToolRaised(exc) from None
            finally:
                self.running -= 1

    def close(self) -> None:
        """Cancel the loop's calls and stop it once they are over, without waiting here:
        a call that never ends keeps its loop (a daemon thread) until the process exits."""
        with self._lock:
            self._closed = True
            loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(_wind_down(), loop)


async def _wind_down() -> None:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks)
    asyncio.get_running_loop().stop()
