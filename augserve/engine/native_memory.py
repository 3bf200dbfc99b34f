"""The C allocator under a server that meets large transient requests.

The hostile soak (docs/server.md) showed the server's RSS growing ~28 MiB an hour
beyond its bounded grammar cache, with Python's own objects flat: glibc kept the pages
of freed multi-megabyte buffers (request bodies, token lists, schema texts) in its
per-thread arenas. Three things hand them back:

- `tune_allocator`, once at start-up, before the model loads: fixed mmap and trim
  thresholds (glibc otherwise moves both after every large free) and at most
  `arena_max` arenas (glibc makes up to 8 per core, one per thread that allocates
  at once).
- `Trimmer`, `malloc_trim(0)` on a thread of its own after a request whose body was
  large (`ServerLimits.trim_after_body_bytes`, asked by the server's body-limit middleware;
  the model loader trims once after a load, `model_build.build_model`):
  requests coalesce, at most one trim runs at a time and at most one per
  `min_interval` seconds, and asking never blocks the event loop.
- Where the C library is not glibc, both do nothing and say so (False).

The thresholds. The mmap threshold was 1 MiB at first (every buffer over it mmapped
and unmapped at its free, so none could stay in an arena). That made each engine step
take its activations as fresh pages: a prefill of 1,024 tokens allocates ~80 MB of
temporaries, and the page faults made the step 1.5x as long (163 against 110 ms on
the 5M-parameter sessions model over HTTP; docs/engine-quant.md's 0.5B prefill lost
0.3 s to them). Now the threshold is glibc's cap, 32 MiB, and the trim threshold
64 MiB: a step's buffers are freed into the engine thread's arena and the next step
takes them again; what an arena keeps free at its top is at most 64 MiB, and
`Trimmer`'s `malloc_trim(0)` after a large body hands back what the big requests
left, wherever it lies.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("augserve.engine")

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
_MMAP_CAP = 32 * 1024 * 1024  # glibc's largest mmap threshold on 64-bit (HEAP_MAX_SIZE / 2)


@dataclass(frozen=True)
class AllocatorTuning:
    """glibc settings for a long-running server (`--no-malloc-tuning` leaves glibc's)."""

    mmap_threshold_bytes: int = _MMAP_CAP  # buffers this large are mmapped, freed at once
    trim_threshold_bytes: int = 64 * 1024 * 1024  # free bytes an arena's top may keep
    arena_max: int = 2

    def __post_init__(self) -> None:
        if not 4096 <= self.mmap_threshold_bytes <= _MMAP_CAP:
            raise ValueError(
                f"mmap_threshold_bytes must be in [4096, 32 MiB], got {self.mmap_threshold_bytes}"
            )
        if self.trim_threshold_bytes < 4096:
            raise ValueError(
                f"trim_threshold_bytes must be >= 4096, got {self.trim_threshold_bytes}"
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
        libc.mallopt(M_TRIM_THRESHOLD, tuning.trim_threshold_bytes),
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
