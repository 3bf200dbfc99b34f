"""Where sync Python tools run: never on the event loop, never on the engine's thread.

`ToolThreads`: each sync Python tool gets its own pool of daemon threads, as many as
its `max_concurrency`. A call past its timeout answers the model at once; its thread
may go on (Python cannot stop a thread), but it only holds a thread of its own
tool's pool, so it cannot slow the engine step, another tool or the exit (the
threads are daemons). While all of a tool's threads are stuck, its next calls wait
in its queue and time out.

`ProcessWorkers` (`isolate: true`): each call runs in a worker process, reused
between calls and killed (SIGKILL) when the call times out or is cancelled, so a
stuck or crashing tool costs nothing but a new worker. Each worker leads its own
process group (its own session), and the whole group is killed, at a timeout and
at exit: whatever the tool started (a `subprocess`, a fork) goes with it. A worker
inherits no descriptor of the server's but its pipes (the listening socket is never
among them). A worker is a fresh
`python -m augserve.server.tool_workers` (a fork of a process with torch's threads
is unsafe); arguments and results must pickle.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import importlib
import inspect
import os
import pickle
import queue
import signal
import struct
import sys
import threading
import typing
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO


class ToolRaised(Exception):
    """A tool raised a BaseException that is not an Exception (KeyboardInterrupt,
    SystemExit, ...): an error answer, never a signal to the server."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(f"{type(exc).__name__}: {exc}")
        self.kind = type(exc).__name__


class ToolThreads(cf.Executor):
    """A bounded pool of daemon threads (started as needed, at most `max_workers`)."""

    def __init__(self, max_workers: int, name: str = "augserve-tool") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.max_workers = max_workers
        self.name = name
        self._work: queue.SimpleQueue[tuple[cf.Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for work
        self._pending = 0  # calls queued that no thread took yet
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        fut: cf.Future[Any] = cf.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the tool pool is shut down")
            self._work.put((fut, lambda: fn(*args, **kwargs)))
            self._pending += 1
            if self._pending > self._idle and len(self._threads) < self.max_workers:
                t = threading.Thread(
                    target=self._worker, name=f"{self.name}-{len(self._threads)}", daemon=True
                )
                self._threads.append(t)
                t.start()
        return fut

    def _worker(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            item = self._work.get()
            with self._lock:
                self._idle -= 1
                self._pending -= item is not None
            if item is None:
                return
            fut, call = item
            if fut.set_running_or_notify_cancel():  # False: cancelled while queued
                try:
                    fut.set_result(call())
                except Exception as exc:
                    fut.set_exception(exc)
                except BaseException as exc:  # a tool's SystemExit must not end the thread,
                    fut.set_exception(ToolRaised(exc))  # nor reach the server's loop

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            for _ in self._threads:
                self._work.put(None)
        if wait:  # daemon threads: a stuck one is left behind, never waited on for long
            for t in self._threads:
                t.join(0.1)

    @property
    def num_threads(self) -> int:
        return len(self._threads)


def load_callable(target: str, search: Sequence[str] = ()) -> Callable[..., Any]:
    """`module:function` (the attribute may be dotted: `module:Class.method`); the
    module is looked for on sys.path, then in the folders `search` (appended to it)."""
    module_name, _, attr = target.partition(":")
    for folder in search:
        if folder not in sys.path:
            sys.path.append(folder)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"python tool {target!r}: cannot import {module_name!r} ({exc})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"python tool {target!r}: {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"python tool {target!r} is not callable")
    return typing.cast(Callable[..., Any], obj)


# --- worker processes -------------------------------------------------------------------
_HEADER = struct.Struct("!I")


def _serve_calls(inp: BinaryIO, out: BinaryIO) -> None:
    """A worker process: run (target, kwargs) calls, framed pickles, until stdin closes."""
    fns: dict[str, Callable[..., Any]] = {}
    while True:
        head = inp.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return
        target, kwargs = pickle.loads(inp.read(_HEADER.unpack(head)[0]))
        try:
            fn = fns.get(target) or fns.setdefault(target, load_callable(target))
            value = fn(**kwargs)
            if inspect.isawaitable(value):
                value = asyncio.run(_awaited(value))
            reply = pickle.dumps(("ok", value))
        except BaseException as exc:  # reported to the parent, which decides
            reply = pickle.dumps(("error", (type(exc).__name__, str(exc))))
        out.write(_HEADER.pack(len(reply)) + reply)
        out.flush()


async def _awaited(value: Any) -> Any:
    return await value


class WorkerError(Exception):
    """A tool raised in its worker process (its type name and message)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


async def _start_worker() -> asyncio.subprocess.Process:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "augserve.server.tool_workers",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
        close_fds=True,
        start_new_session=True,  # its own process group: killed as one (`kill_group`)
    )


def kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL a worker's whole process group (it leads it), the worker included."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


class ProcessWorkers:
    """Worker processes for one isolated tool (`target` = "module:function"): at most
    `max_workers` at once, reused between calls, killed at a timeout or cancel."""

    def __init__(self, target: str, max_workers: int) -> None:
        self.target = target
        self.max_workers = max_workers
        self._idle: list[asyncio.subprocess.Process] = []
        self._live: set[asyncio.subprocess.Process] = set()  # every worker not yet reaped
        self._slots = asyncio.Semaphore(max_workers)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.started = 0  # worker processes started so far
        self.killed = 0

    def _bind(self) -> None:
        """Workers belong to one event loop; a new loop (tests) starts afresh."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self.kill_now()
            self._idle, self._live, self._loop = [], set(), loop
            self._slots = asyncio.Semaphore(self.max_workers)

    async def warm(self) -> None:
        """Start one worker ahead of the first call (a start takes ~0.1-1 s)."""
        self._bind()
        if not self._idle:
            self._idle.append(await self._start())

    async def call(self, kwargs: dict[str, Any]) -> Any:
        self._bind()
        async with self._slots:
            proc = self._idle.pop() if self._idle else None
            if proc is None or proc.returncode is not None:
                proc = await self._start()
            ok = False
            try:
                kind, value = await self._roundtrip(proc, kwargs)
                ok = True
            finally:
                if ok:
                    self._idle.append(proc)
                else:  # timed out, cancelled or died: the worker goes
                    self.killed += 1
                    await self._kill(proc)
        if kind == "error":
            raise WorkerError(value[0], value[1])
        return value

    async def _roundtrip(self, proc: asyncio.subprocess.Process, kwargs: dict[str, Any]) -> Any:
        assert proc.stdin is not None and proc.stdout is not None
        data = pickle.dumps((self.target, kwargs))
        proc.stdin.write(_HEADER.pack(len(data)) + data)
        try:
            await proc.stdin.drain()
            head = await proc.stdout.readexactly(_HEADER.size)
            return pickle.loads(await proc.stdout.readexactly(_HEADER.unpack(head)[0]))
        except (asyncio.IncompleteReadError, ConnectionError):
            code = await proc.wait()
            raise WorkerError("WorkerDied", f"the worker process died (exit code {code})") from None

    async def _start(self) -> asyncio.subprocess.Process:
        proc = await _start_worker()
        self.started += 1
        self._live.add(proc)
        return proc

    async def _kill(self, proc: asyncio.subprocess.Process) -> None:
        kill_group(proc)  # even when the worker itself is gone: what it started is not
        await proc.wait()
        self._live.discard(proc)

    async def close(self) -> None:
        self._idle = []
        for proc in list(self._live):
            await self._kill(proc)

    def kill_now(self) -> None:
        """Kill every worker's group at once, without waiting (a forced exit)."""
        for proc in self._live:
            kill_group(proc)


def main() -> None:
    """`python -m augserve.server.tool_workers`: calls on stdin, replies on stdout;
    whatever a tool prints goes to stderr."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _serve_calls(sys.stdin.buffer, out)


if __name__ == "__main__":
    main()
