"""Python tools the server tests register (by `augserve_test_tools:NAME`)."""

from __future__ import annotations

import asyncio
import threading
import time

_lock = threading.Lock()
_active = 0
peak = 0
calls: list[dict] = []


def get_weather(city: str, unit: str = "C") -> dict:
    """The weather in a city."""
    calls.append({"city": city, "unit": unit})
    return {"city": city, "temp": 21, "unit": unit}


async def add(a: int, b: int) -> int:
    """Add two integers."""
    await asyncio.sleep(0)
    return a + b


async def add_slowly(a: int, b: int, ms: int = 200) -> int:
    """Add two integers, taking `ms` milliseconds."""
    await asyncio.sleep(ms / 1000)
    return a + b


def boom(x: str = "") -> str:
    raise RuntimeError(f"boom {x}")


def sleepy(seconds: float = 5.0) -> str:
    time.sleep(seconds)
    return "woke up"


def garbage() -> object:
    return object()


def bad_bytes() -> bytes:
    return b"\xff\xfe\x00"


def huge() -> str:
    return "x" * 100_000


def exits() -> None:
    raise SystemExit(3)


def slow_counted(ms: int = 50) -> int:
    """Sleeps `ms` ms and records how many calls ran at once."""
    global _active, peak
    with _lock:
        _active += 1
        peak = max(peak, _active)
    time.sleep(ms / 1000)
    with _lock:
        _active -= 1
    return ms


def hang(seconds: float = 3600.0) -> str:
    """Blocks its thread for an hour (a tool that never returns, as far as a test sees)."""
    threading.Event().wait(seconds)
    return "never"


def pid() -> int:
    """The process the tool runs in."""
    import os

    return os.getpid()


def crash() -> None:
    """Kills the process it runs in (only ever registered with isolate: true)."""
    import os

    os._exit(7)


# --- tools that try to escape (test_tool_escape.py) -----------------------------------------
stubborn_done = threading.Event()  # set when `stubborn` finally returns ...
entered = threading.Event()  # `blocks_its_loop` is inside its blocking wait
release = threading.Event()  # ... which ends when this is set


stubborn_release = threading.Event()  # ... or when this is set


async def stubborn(seconds: float = 3.0) -> str:
    """Swallows every cancellation and goes on for `seconds` (or until
    `stubborn_release`), then returns."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stubborn_release.is_set():
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:  # noqa: SIM105 (swallowed on purpose, visibly)
            continue
    stubborn_done.set()
    return "late result"


async def blocks_its_loop() -> str:
    """An async tool that blocks the loop it runs on (a threading wait, as time.sleep)."""
    entered.set()
    return "released" if release.wait(10) else "blocked"


def interrupt() -> None:
    raise KeyboardInterrupt("from a tool")


async def interrupt_async() -> None:
    raise KeyboardInterrupt("from an async tool")


async def exits_async() -> None:
    raise SystemExit(4)


def _record_pid(pid: int) -> None:
    import os

    path = os.environ.get("AUGSERVE_TEST_PIDS")
    if path:
        with open(path, "a") as f:
            f.write(f"{pid}\n")


def forker() -> int:
    """Forks a child that sleeps a minute (it would hold what it inherited)."""
    import os

    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    _record_pid(child)
    return child


def spawns_and_hangs(path: str = "") -> str:
    """Starts a `sleep` (recording its pid in `path`), then blocks (isolate: true)."""
    import subprocess

    proc = subprocess.Popen(["sleep", "300"])
    if path:
        with open(path, "w") as f:
            f.write(str(proc.pid))
    threading.Event().wait(3600)
    return "never"


def spawns(path: str = "") -> int:
    """Starts a `sleep` in the background (recording its pid in `path`) and returns."""
    import subprocess

    proc = subprocess.Popen(["sleep", "300"])
    if path:
        with open(path, "w") as f:
            f.write(str(proc.pid))
    return proc.pid


async def stubborn_forever() -> str:
    """`stubborn` for ten minutes (no arguments: a forced call cannot shorten it)."""
    return await stubborn(600.0)


def hang_forever() -> str:
    return hang(600.0)
