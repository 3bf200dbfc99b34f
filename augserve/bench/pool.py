"""Run many bench points in worker processes, and stop cleanly on Ctrl-C.

`run_points` hands each finished point to a callback as it finishes. On
Ctrl-C nothing more starts, the workers are terminated and reaped (none is
left running) and the KeyboardInterrupt goes on to the caller, which writes
what finished. Workers ignore SIGINT (a terminal sends it to the whole
process group; the parent decides) and die with their parent (Linux
PR_SET_PDEATHSIG). `interrupt_guard` makes a second Ctrl-C exit at once;
`hold_interrupt` keeps a first one out of a block that must not be cut in half.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any

from augserve.bench.runner import BenchPoint, Row, get_backend

OnResult = Callable[[int, list[Row]], None]


def run_one(point: BenchPoint) -> list[Row]:
    """Run one point on its backend (in whatever process this is)."""
    return get_backend(point.backend)(point)


def run_points(
    points: Sequence[BenchPoint],
    workers: int | None = None,
    progress: bool = True,
    on_result: OnResult | None = None,
    desc: str = "bench",
) -> list[Row]:
    """Run every point (in parallel worker processes when workers > 1), in point order.

    `on_result(index, rows)` is called in this process as each point finishes.
    On Ctrl-C (KeyboardInterrupt) nothing more is started, the workers are
    terminated (none is left running) and the KeyboardInterrupt propagates;
    `on_result` has seen every point that finished.
    """
    workers = max(1, min(workers or os.cpu_count() or 1, len(points) or 1))
    bar = progress_bar(len(points), progress, desc)
    by_index: dict[int, list[Row]] = {}

    def done(i: int, rows: list[Row]) -> None:
        by_index[i] = rows
        if on_result is not None:
            on_result(i, rows)
        bar.update(1)

    try:
        if workers == 1:
            for i, p in enumerate(points):
                done(i, run_one(p))
        else:
            _run_pool(points, workers, done)
    finally:
        bar.close()
    return [row for i in range(len(points)) for row in by_index[i]]


def _run_pool(points: Sequence[BenchPoint], workers: int, done: OnResult) -> None:
    order = cost_order(points)
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init)
    _LIVE_POOLS.append(pool)
    try:
        futures = {pool.submit(run_one, points[i]): i for i in order}
        for fut in as_completed(futures):
            done(futures[fut], fut.result())
    except BaseException:
        _stop_pool(pool)
        raise
    finally:
        _LIVE_POOLS.remove(pool)
    pool.shutdown(wait=True)


def _worker_init() -> None:
    """In each worker: Ctrl-C is the parent's to handle (a terminal sends it to the
    whole process group), and the worker dies with its parent (Linux)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


_LIVE_POOLS: list[ProcessPoolExecutor] = []


def _pool_processes(pool: ProcessPoolExecutor) -> list[Any]:
    # concurrent.futures has no public handle on its processes before Python 3.14
    return list((getattr(pool, "_processes", None) or {}).values())


def _stop_pool(pool: ProcessPoolExecutor, grace_s: float = 0.5) -> None:
    """Cancel what has not started, terminate the workers, reap them (kill if needed)."""
    procs = _pool_processes(pool)
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(1.0)


def kill_workers() -> None:
    """SIGKILL every worker of a running `run_points` (used by a second Ctrl-C)."""
    for pool in list(_LIVE_POOLS):
        for proc in _pool_processes(pool):
            if proc.pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def interrupt_guard() -> Iterator[None]:
    """Ctrl-C handling for a run that saves its work when interrupted: the first
    Ctrl-C raises KeyboardInterrupt (the caller stops and writes what finished);
    any further one kills the workers and exits at once with status 130, also after
    the guarded block (a Ctrl-C during the interpreter's teardown once died of SIGINT)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    presses = 0

    def handler(signum: int, frame: Any) -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            if _HELD["depth"]:
                _HELD["pending"] = 1  # raised when the held block ends
                return
            raise KeyboardInterrupt
        kill_workers()
        with contextlib.suppress(OSError):
            os.write(2, b"\naugserve: interrupted again: exiting now\n")
        os._exit(130)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        if presses == 0:  # once interrupted, a further Ctrl-C exits at once until the
            signal.signal(signal.SIGINT, previous)  # process ends (its teardown included)


_HELD: dict[str, int] = {"depth": 0, "pending": 0}


@contextlib.contextmanager
def hold_interrupt() -> Iterator[None]:
    """Under `interrupt_guard`, a first Ctrl-C landing in this block is held and
    raised as KeyboardInterrupt when the block ends (a second one still exits at
    once). For work a KeyboardInterrupt would leave half done, such as an import:
    a C extension cut off mid-import cannot always be imported again."""
    _HELD["depth"] += 1
    try:
        yield
    finally:
        _HELD["depth"] -= 1
    if not _HELD["depth"] and _HELD["pending"]:
        _HELD["pending"] = 0
        raise KeyboardInterrupt


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int, enabled: bool, desc: str = "bench") -> Any:
    """A tqdm bar over `total` points (an object with `update`/`close` that draws nothing
    when not `enabled`)."""
    if not enabled:
        return _NoBar()
    from tqdm import tqdm  # type: ignore[import-untyped]

    return tqdm(total=total, desc=desc, unit="pt")


def cost_order(points: Sequence[BenchPoint]) -> list[int]:
    """Point indices, the costliest first (highest rate x window): a shorter tail."""
    return sorted(range(len(points)), key=lambda i: -points[i].rate * points[i].window)
