"""Where a soaked server's resident memory goes: the samples `soak_server.py` takes
inside the server process, and the slopes it reports.

RSS alone cannot tell a leak from a cache filling to its bound or from the allocator
keeping freed pages. So the server samples, every `interval` seconds:

- `rss`: its resident set (`/proc/self/status`);
- `grammar_cache`: the bytes of compiled grammars its LRU holds (bounded by
  `--grammar-cache-bytes`: growth there is a cache filling, not a leak);
- `malloc_used` / `malloc_free`: glibc's `mallinfo2()` summed over every arena, the
  bytes handed out (small blocks plus mmapped ones) and the bytes freed but kept in
  the arenas (fragmentation: RSS the program no longer uses);
- `rss_anon` / `rss_file`: the resident set split into anonymous memory (heaps,
  arenas, stacks) and file-backed pages (the code and data of the libraries, which
  grow as new code paths run and stop there), from `/proc/self/smaps_rollup`;
- `py_blocks`: the thousands of blocks Python's small-object allocator has handed out
  (`sys.getallocatedblocks`): flat if Python's objects do not grow;
- `py_traced`: with `tracemalloc` on (a diagnostic run: it slows every allocation),
  the bytes Python objects hold, and at the end the source lines whose allocations
  grew most since the first sample.

Samples go to a JSON file, rewritten after each one; the client reads it at the end.
"""

from __future__ import annotations

import ctypes
import json
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

from augserve.engine.grammar_cache import engine_cache_bytes

MIB = 2**20


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
        "uordblks", "fordblks", "keepcost",
    )]  # fmt: skip


def malloc_stats() -> dict[str, float]:
    """glibc's heap in MiB: used (small blocks + mmapped) and free kept in arenas;
    empty where the C library has no `mallinfo2` (not glibc, or glibc < 2.33)."""
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return {}
    fn.restype = _MallInfo2
    m = fn()
    return {"malloc_used": (m.uordblks + m.hblkhd) / MIB, "malloc_free": m.fordblks / MIB}


def rss_split() -> dict[str, float]:
    """Anonymous and file-backed resident MiB (empty where /proc has no smaps_rollup)."""
    try:
        lines = Path("/proc/self/smaps_rollup").read_text().splitlines()
    except OSError:
        return {}
    kib = {x.split(":")[0]: int(x.split()[1]) for x in lines[1:] if x.endswith("kB")}
    anon = kib.get("Anonymous", 0)
    return {"rss_anon": anon / 1024, "rss_file": (kib.get("Rss", 0) - anon) / 1024}


def rss_mib() -> float:
    status = Path("/proc/self/status").read_text()
    return next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS")) / 1024


def grammar_cache_mib(engine: Any) -> float:
    return engine_cache_bytes(engine) / MIB


def _top_growth(first: tracemalloc.Snapshot, last: tracemalloc.Snapshot) -> list[dict[str, Any]]:
    stats = last.compare_to(first, "lineno")
    return [
        {
            "where": str(s.traceback[0]),
            "size_diff_mib": s.size_diff / MIB,
            "count_diff": s.count_diff,
        }  # fmt: skip
        for s in stats[:15]
    ]


class MemorySampler:
    """A daemon thread in the server process sampling its memory (see the module)."""

    def __init__(self, engine: Any, path: Path, interval: float, trace: bool) -> None:
        self.engine, self.path, self.interval, self.trace = engine, path, interval, trace
        self.samples: list[dict[str, float]] = []
        self.t0 = time.monotonic()
        self._first: tracemalloc.Snapshot | None = None
        if trace:
            tracemalloc.start(1)

    def start(self) -> None:
        threading.Thread(target=self._loop, name="soak-memory", daemon=True).start()

    def _loop(self) -> None:
        while True:
            time.sleep(self.interval)
            self.sample()

    def sample(self) -> None:
        s = {"t": time.monotonic() - self.t0, "rss": rss_mib(),
             "grammar_cache": grammar_cache_mib(self.engine), **malloc_stats(),
             **rss_split(), "py_blocks": sys.getallocatedblocks() / 1000}  # fmt: skip
        out: dict[str, Any] = {"samples": self.samples}
        if self.trace:
            s["py_traced"] = tracemalloc.get_traced_memory()[0] / MIB
            snap = tracemalloc.take_snapshot()
            if self._first is None:
                self._first = snap
            out["py_top_growth"] = _top_growth(self._first, snap)
        self.samples.append(s)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out))
        tmp.replace(self.path)


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of (seconds, MiB) points, in MiB per hour."""
    import numpy as np

    if len(points) < 3:
        return 0.0
    t, v = zip(*points, strict=True)
    return float(np.polyfit(t, v, 1)[0] * 3600)


def robust_slope_per_hour(points: list[tuple[float, float]]) -> float:
    """The Theil-Sen slope (the median of the slopes between every pair of points), in
    MiB per hour: a few transient spikes, which move least squares, barely move it."""
    import numpy as np

    if len(points) < 3:
        return 0.0
    t, v = (np.asarray(x, dtype=float) for x in zip(*points, strict=True))
    i, j = np.triu_indices(len(t), k=1)
    dt = t[j] - t[i]
    keep = dt > 0
    return float(np.median((v[j] - v[i])[keep] / dt[keep]) * 3600)


def window_floors(points: list[tuple[float, float]], window_s: float) -> list[float]:
    """The lowest value in each `window_s` window, from the first point on: a holder
    that only grows lifts the floor; transient buffers come and go above it."""
    if not points:
        return []
    t0 = points[0][0]
    floors: dict[int, float] = {}
    for t, v in points:
        w = int((t - t0) // window_s)
        floors[w] = min(v, floors.get(w, v))
    return [floors[w] for w in sorted(floors)]


def memory_report(path: Path, after_s: float, window_s: float = 300.0) -> dict[str, Any]:
    """The slopes of each sampled quantity after `after_s` seconds (the warm-up), RSS
    less the grammar cache among them, by least squares and by Theil-Sen, the floors
    of RSS and the heap in use per window, the samples themselves, and tracemalloc's
    top growth if it ran."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    samples = [s for s in data["samples"] if s["t"] >= after_s] or data["samples"]
    keys = [k for k in samples[0] if k != "t"] if samples else []
    series = {k: [(s["t"], s[k]) for s in samples] for k in keys}
    out: dict[str, Any] = {
        "interval_samples": len(data["samples"]),
        "start": data["samples"][0] if data["samples"] else None,
        "end": data["samples"][-1] if data["samples"] else None,
        "slopes_mib_per_hour": {k: slope_per_hour(v) for k, v in series.items()},
    }
    slopes = out["slopes_mib_per_hour"]
    slopes["rss_less_grammar_cache"] = slope_per_hour(
        [(s["t"], s["rss"] - s["grammar_cache"]) for s in samples]
    )
    if samples and {"rss_anon", "malloc_used", "malloc_free"} <= set(samples[0]):
        # anonymous memory glibc's heap does not account for: Python's arenas, stacks
        slopes["anon_outside_malloc"] = slope_per_hour(
            [(s["t"], s["rss_anon"] - s["malloc_used"] - s["malloc_free"]) for s in samples]
        )
    out["robust_slopes_mib_per_hour"] = {k: robust_slope_per_hour(v) for k, v in series.items()}
    out["window_floors_mib"] = {
        k: window_floors(series[k], window_s) for k in ("rss", "malloc_used") if k in series
    }
    out["samples"] = data["samples"]
    if "py_top_growth" in data:
        out["py_top_growth"] = data["py_top_growth"]
    return out
