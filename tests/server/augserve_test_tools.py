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
