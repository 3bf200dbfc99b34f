"""The allocator settings and the trimmer (engine/native_memory.py), and the server's
middleware asking for a trim after a large body, not after a small one."""

from __future__ import annotations

import asyncio
import ctypes
import threading
from typing import Any

import pytest

from augserve.engine.native_memory import AllocatorTuning, Trimmer, malloc_trim, tune_allocator
from augserve.server.middleware import BodyLimitMiddleware
from augserve.server.state import ServerLimits


def _glibc() -> bool:
    try:
        ctypes.CDLL(None).mallopt  # noqa: B018
    except (OSError, AttributeError):
        return False
    return True


@pytest.mark.parametrize(
    ("field", "kw"),
    [("mmap_threshold_bytes", {"mmap_threshold_bytes": 100}),
     ("mmap_threshold_bytes", {"mmap_threshold_bytes": 64 * 2**20}),
     ("trim_threshold_bytes", {"trim_threshold_bytes": 0}),
     ("arena_max", {"arena_max": 0})],
)  # fmt: skip
def test_tuning_names_the_bad_field(field: str, kw: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=field):
        AllocatorTuning(**kw)


def test_limits_name_a_bad_trim_size() -> None:
    with pytest.raises(ValueError, match="trim_after_body_bytes"):
        ServerLimits(trim_after_body_bytes=0)


@pytest.mark.skipif(not _glibc(), reason="not glibc")
def test_glibc_takes_the_settings_and_trims() -> None:
    assert tune_allocator(AllocatorTuning(mmap_threshold_bytes=1 << 20, arena_max=2))
    bufs = [ctypes.create_string_buffer(200_000) for _ in range(50)]  # below the threshold
    del bufs
    assert isinstance(malloc_trim(), bool)


_FAULTS = """
import ctypes, resource, sys
from augserve.engine.native_memory import AllocatorTuning, tune_allocator
if sys.argv[1] != "glibc":
    assert tune_allocator(AllocatorTuning(mmap_threshold_bytes=int(sys.argv[1])))
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 16 << 20  # an engine step's temporary (a 1,024-token prefill's MLP activations)
faults = []
for _ in range(4):  # four steps: allocate, write every page, free
    p = libc.malloc(size)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    ctypes.memset(p, 1, size)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    libc.free(p)
print(faults[-1])
"""


def _step_faults(setting: str) -> int:
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _FAULTS, setting], capture_output=True,
                         text=True, timeout=120, check=True)  # fmt: skip
    return int(run.stdout.split()[-1])


@pytest.mark.skipif(not _glibc(), reason="not glibc")
def test_a_steps_buffers_come_back_without_page_faults() -> None:
    """With the server's thresholds a 16 MiB buffer freed by one step is the next
    step's, its pages resident; with a 1 MiB mmap threshold (this file's first
    setting) every step faults all of its 4,096 pages in again."""
    pages = (16 << 20) // 4096
    assert _step_faults(str(AllocatorTuning().mmap_threshold_bytes)) < pages // 16
    assert _step_faults(str(1 << 20)) >= pages // 2


def test_asks_fold_into_one_trim_per_interval() -> None:
    ran = threading.Event()
    release = threading.Event()

    def trim() -> bool:
        ran.set()
        release.wait(10)
        return True

    t = Trimmer(min_interval=60.0, trim=trim)
    t.request()
    assert ran.wait(10)
    for _ in range(20):  # while the first trim runs: folded into one later trim
        t.request()
    release.set()
    t.close()
    t._thread.join(10)  # type: ignore[union-attr]
    assert t.count == 1  # the next could only run 60 s after the first; close ended it


def test_a_failing_trim_does_not_end_the_thread() -> None:
    calls: list[int] = []
    done = threading.Event()

    def trim() -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        done.set()
        return True

    t = Trimmer(min_interval=0.0, trim=trim)
    t.request()
    while not calls:
        threading.Event().wait(0.01)
    t.request()
    assert done.wait(10)
    t.close()
    assert len(calls) == 2


def _run(mw: BodyLimitMiddleware, body: bytes) -> int:
    sent: list[dict[str, Any]] = []
    parts = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return parts.pop(0) if parts else {"type": "http.disconnect"}

    async def send(msg: Any) -> None:
        sent.append(msg)

    scope = {"type": "http", "path": "/tokenize", "headers": []}
    asyncio.run(mw(scope, receive, send))
    return int(sent[0]["status"])


async def _echo(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_a_large_body_asks_for_a_trim_after_its_answer() -> None:
    asked: list[int] = []
    mw = BodyLimitMiddleware(
        _echo, max_bytes=1 << 20, large_body_bytes=1000, after_large=lambda: asked.append(1)
    )
    assert _run(mw, b"x" * 999) == 200
    assert asked == []
    assert _run(mw, b"x" * 1000) == 200
    assert asked == [1]
    assert _run(mw, b"x" * (2 << 20)) == 413  # read (no Content-Length), then refused
    assert asked == [1, 1]
    off = BodyLimitMiddleware(_echo, max_bytes=1 << 20, after_large=lambda: asked.append(1))
    assert _run(off, b"x" * 5000) == 200
    assert asked == [1, 1]
