"""Request preparation off the event loop: bounded thread pools, and a time budget on
grammar compilation.

The event loop only moves bytes. Everything a request needs before it reaches the
engine (the checks of `input_limits.py`, JSON schema validation, the chat template,
tokenization, grammar compilation) runs in `Preparer.run`, on a small pool of
threads with a bounded queue: past it a request gets 503 at once. The tokenizer
releases the GIL on long texts (`engine/tokenizer.py`), xgrammar while it compiles,
so `/health` and the running streams keep being served.

Grammars compile on a pool of their own (`Preparer.compile`, called from a
preparation thread), under `grammar_timeout`: past it the request gets a 400 and
the compile is abandoned. xgrammar cannot be interrupted, so an abandoned compile
runs on in its thread and its result is dropped (never cached); the compile pool's
bounded queue (503 past it) keeps such compiles from piling up, and nothing of it
holds the event loop or the engine. The threads are daemons: a compile still running
at shutdown does not hold up the process's exit (SIGTERM works while it runs).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from augserve.engine.grammar_cache import engine_cache_bytes
from augserve.engine.sampling_params import GrammarSpec
from augserve.server.errors import APIError
from augserve.server.input_limits import PrepLimits

log = logging.getLogger("augserve.server")
T = TypeVar("T")


class DaemonPool:
    """A fixed pool of daemon threads running submitted calls, counting the calls
    submitted and not yet finished (`pending`: running or queued)."""

    def __init__(self, workers: int, name: str) -> None:
        self.workers = workers
        self.name = name
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.pending = 0

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            self.pending += 1
            if len(self._threads) < min(self.workers, self.pending):
                t = threading.Thread(target=self._work, name=f"{self.name}-{len(self._threads)}")
                t.daemon = True
                self._threads.append(t)
                t.start()
        self._jobs.put((fut, fn, args))
        return fut

    def _work(self) -> None:
        while True:
            fut, fn, args = self._jobs.get()
            try:
                if fut.set_running_or_notify_cancel():
                    try:
                        fut.set_result(fn(*args))
                    except BaseException as exc:  # the caller gets it, the thread lives
                        fut.set_exception(exc)
            finally:
                with self._lock:
                    self.pending -= 1


class Preparer:
    """The preparation and grammar pools of one server, and their limits."""

    def __init__(self, limits: PrepLimits) -> None:
        self.limits = limits
        self.pool = DaemonPool(limits.workers, "augserve-prep")
        self.compiles = DaemonPool(limits.grammar_workers, "augserve-grammar")
        self.rejected = 0  # requests turned away (503) with the pool full
        self.compile_timeouts = 0  # compiles abandoned past their budget

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on a preparation thread; 503 when the pool and its queue are full."""
        if self.pool.pending >= self.limits.workers + self.limits.queue:
            self.rejected += 1
            raise APIError(
                503,
                f"the server is busy: {self.pool.pending} requests are being prepared; "
                "retry shortly",
                code="server_busy",
            )
        return await asyncio.wrap_future(self.pool.submit(fn, *args))

    def compile(self, masker: Any, spec: GrammarSpec, where: str) -> GrammarSpec:
        """`spec` with its compiled grammar (from the cache, else compiled within the
        budget); 400 naming `where` if it cannot compile or takes too long. Called on a
        preparation thread: it waits there, never on the event loop."""
        from augserve.engine.grammar import GrammarError

        hit = masker.cache.get(spec)
        if hit is not None:
            return replace(spec, compiled=hit)
        lim = self.limits
        if self.compiles.pending >= lim.grammar_workers + lim.grammar_queue:
            raise APIError(
                503, "the server is busy compiling grammars; retry shortly", code="server_busy"
            )
        fut = self.compiles.submit(masker.build, spec)
        try:
            compiled = fut.result(timeout=lim.grammar_timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()  # not started yet: it never will; running: its result is dropped
            self.compile_timeouts += 1
            log.warning(
                "a grammar for %s took over %g s to compile: abandoned", where, lim.grammar_timeout
            )
            raise APIError(
                400,
                f"{where}: its grammar takes over {lim.grammar_timeout:g} s to compile "
                "(--grammar-compile-timeout); simplify the schema",
                param=where,
                code="grammar_too_complex",
            ) from None
        except GrammarError as exc:
            msg = f"{where}: cannot constrain decoding to it: {exc}"
            raise APIError(400, msg, param=where) from None
        masker.store(spec, compiled)
        return replace(spec, compiled=compiled)


class PrepCollector:
    """/metrics: the preparation pools and the grammar cache, read at scrape time."""

    def __init__(self, preparer: Preparer, engine: Any) -> None:
        self.preparer = preparer
        self.engine = engine  # the LLMEngine, whose grammar masker is built on first use

    def collect(self) -> Iterator[Metric]:
        p = self.preparer
        yield GaugeMetricFamily(
            "augserve_prep_pending", "Requests being prepared or waiting for it", p.pool.pending
        )
        yield CounterMetricFamily(
            "augserve_prep_rejected", "Requests refused (503) with the preparation queue full",
            p.rejected,
        )  # fmt: skip
        yield CounterMetricFamily(
            "augserve_grammar_compile_timeouts",
            "Grammar compiles abandoned past --grammar-compile-timeout",
            p.compile_timeouts,
        )
        yield GaugeMetricFamily(
            "augserve_grammar_cache_bytes",
            "Bytes of the compiled grammars kept (bounded by --grammar-cache-bytes)",
            engine_cache_bytes(self.engine),
        )
