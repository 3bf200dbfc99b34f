"""The C allocator under a server that meets large transient requests.

The hostile soak (docs/server.md) showed the server's RSS growing ~28 MiB an hour
beyond its bounded grammar cache, with Python's own objects flat: glibc kept the pages
of freed multi-megabyte buffers (request bodies, token lists, schema texts) in its
per-thread arenas. Three things hand them back:

- `tune_allocator`, once at start-up, before the model loads: a fixed mmap threshold
  (glibc otherwise raises it after every large free, up to 32 MiB, so that the next
  large buffers come from the arenas and fragment them) and at most `arena_max`
  arenas (glibc makes up to 8 per core, one per thread that allocates at once).
- `Trimmer`, `malloc_trim(0)` on a thread of its own after a request whose body was
  large (`ServerLimits.trim_after_body_bytes`, asked by the server's body-limit middleware;
  the model loader trims once after a load, `model_build.build_model`):
  requests coalesce, at most one trim runs at a time and at most one per
  `min_interval` seconds, and asking never blocks the event loop.
- Where the C library is not glibc, both do nothing and say so (False).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("augserve.engine")

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters (malloc.h)
M_ARENA_MAX = -8


@dataclass(frozen=True)
class AllocatorTuning:
    """glibc settings for a long-running server (`--no-malloc-tuning` leaves glibc's)."""

    mmap_threshold_bytes: int = 1024 * 1024  # buffers this large are mmapped, freed at once
    arena_max: int = 2

    def __post_init__(self) -> None:
        # glibc caps the threshold at 32 MiB on 64-bit (HEAP_MAX_SIZE / 2)
        if not 4096 <= self.mmap_threshold_bytes <= 32 * 1024 * 1024:
            raise ValueError(
                f"mmap_threshold_bytes must be in [4096, 32 MiB], got {self.mmap_threshold_bytes}"
            )
        if self.arena_max < 1:
            raise ValueError(f"arena_max must be >= 1, got {self.arena_max}")


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt  # noqa: B018 (glibc only: AttributeError elsewhere)
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def tune_allocator(tuning: AllocatorTuning = AllocatorTuning()) -> bool:
    """Apply `tuning` to this process's glibc; False where it could not (not glibc)."""
    libc = _libc()
    if libc is None:
        log.info("not glibc: the allocator is left as it is")
        return False
    done = [
        libc.mallopt(M_MMAP_THRESHOLD, tuning.mmap_threshold_bytes),
        libc.mallopt(M_ARENA_MAX, tuning.arena_max),
    ]  # both are tried; mallopt returns 1 on success
    return all(r == 1 for r in done)


def malloc_trim() -> bool:
    """glibc's malloc_trim(0): every arena's free pages back to the OS. False where not
    glibc, or where nothing could be released."""
    libc = _libc()
    if libc is None:
        return False
    with contextlib.suppress(OSError):
        return bool(libc.malloc_trim(0))
    return False


class Trimmer:
    """Runs `trim` on its own daemon thread when asked: asks that come while a trim runs
    or within `min_interval` seconds of the last one are folded into the next."""

    def __init__(self, min_interval: float = 1.0, trim: Callable[[], bool] = malloc_trim) -> None:
        if min_interval < 0:
            raise ValueError(f"min_interval must be >= 0, got {min_interval}")
        self.min_interval = min_interval
        self.trim = trim
        self.count = 0  # trims run so far (written by the trim thread only)
        self._asked = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def request(self) -> None:
        """Ask for a trim soon; returns at once."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="augserve-malloc-trim", daemon=True
                )
                self._thread.start()
        self._asked.set()

    def close(self) -> None:
        self._stop.set()
        self._asked.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._asked.wait()
            if self._stop.is_set():
                return
            self._asked.clear()
            try:
                self.trim()
            except Exception:  # a trim that fails must not end the thread
                log.exception("malloc_trim failed")
            self.count += 1
            self._stop.wait(self.min_interval)
