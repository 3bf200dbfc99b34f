"""CPU seconds of a process tree and the lag of this process's event loop, over a phase
of a benchmark (`diag_first_token.py`): who used the machine's cores, and how late the
client itself ran."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
TICK = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):  # the thread ended meanwhile
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def tree_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of `pid` and every descendant, by 'pid:name'."""
    seen: dict[str, float] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        seen[f"{p}:{name}"] = (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
        todo += _children(p)
    return seen


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Seconds each process used between the two readings (new ones from zero)."""
    return {k: round(v - before.get(k, 0.0), 2) for k, v in after.items()}


def self_cpu() -> float:
    t = os.times()
    return t.user + t.system


async def with_loop_lag(work: Awaitable[T], interval: float = 0.05) -> tuple[T, dict[str, Any]]:
    """`work`'s result, and how late a probe sleeping `interval` s on this loop woke."""
    lags: list[float] = []

    async def probe() -> None:
        while True:
            start = time.monotonic()
            await asyncio.sleep(interval)
            lags.append(time.monotonic() - start - interval)

    task = asyncio.create_task(probe())
    try:
        result = await work
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    s = sorted(lags) or [0.0]
    summary = {"n": len(lags), "mean": sum(s) / len(s), "p95": s[int(0.95 * (len(s) - 1))],
               "p99": s[int(0.99 * (len(s) - 1))], "max": s[-1]}  # fmt: skip
    return result, summary
