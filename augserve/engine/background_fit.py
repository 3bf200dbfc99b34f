"""The start-up latency fit, run while the engine already serves (issue 34).

`augserve serve` answers `/health` as soon as the model is loaded. If no cached fit
exists for this engine and machine (`startup_profile.py`), the scheduler starts
with the placeholder model (`latency_default.py`) behind a `SwitchableLatency`,
and `LatencyFit` times the start-up grid one batch shape per `step`, between
engine steps on the engine's own thread (`AsyncLLMEngine`), so a request waits for
at most one shape (two forwards of a small batch). Each shape writes only device
blocks borrowed from the scheduler's pool for that shape: never-cached free
blocks (no request's KV, no prefix-cache entry), handed back at once; the swap
link is timed on borrowed device and host blocks the same way. When the last shape
is timed the profile is fitted, cached, and the scheduler switches to it
(`LLMEngine.set_latency`); `augserve_latency_profile_info` then says "fitted".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from augserve.core.block_pool import BlockPool
from augserve.core.latency import BatchShape, LatencyModel, LatencyProfile
from augserve.engine import profiler
from augserve.engine.model_runner import ModelRunner
from augserve.engine.startup_profile import quality_line, startup_grid, write_cached

log = logging.getLogger(__name__)
Measure = Callable[[ModelRunner, profiler.BatchSpec, Sequence[int]], float]
SWAP_BLOCKS = 64  # blocks copied each way to time the host link


def time_one(runner: ModelRunner, spec: profiler.BatchSpec, blocks: Sequence[int]) -> float:
    """Seconds for the batch on `blocks`: a warm-up, then the faster of two timed runs
    (a busy machine only ever adds time; one run was the start-up fit's, and a single
    slow sample is what made its held-out error reach hundreds of percent)."""
    return profiler.time_batch(runner, spec, repeats=2, blocks=blocks)


class SwitchableLatency:
    """A latency model the engine can swap under the scheduler: every question goes to
    the model in use (`current`); other attributes (a profile's `name`, `c0`) too."""

    def __init__(self, current: LatencyModel) -> None:
        self.current = current

    @property
    def kv_bytes_per_token(self) -> int:
        return self.current.kv_bytes_per_token

    def iteration_time(self, shape: BatchShape) -> float:
        return self.current.iteration_time(shape)

    def prefill_time(self, num_tokens: int) -> float:
        return self.current.prefill_time(num_tokens)

    def decode_iter_time(self) -> float:
        return self.current.decode_iter_time()

    def swap_time(self, num_tokens: int) -> float:
        return self.current.swap_time(num_tokens)

    def swap_tokens_per_iter(self) -> int:
        return self.current.swap_tokens_per_iter()

    def __getattr__(self, name: str) -> Any:
        if name == "current":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.current, name)

    def __eq__(self, other: object) -> bool:
        inner = other.current if isinstance(other, SwitchableLatency) else other
        return bool(self.current == inner)

    __hash__ = None  # type: ignore[assignment]


def borrow_device(pool: BlockPool, want: int) -> list[int]:
    """Up to `want` never-cached free device blocks (none holds a request's KV or a
    prefix-cache entry), taken from the pool until `pool.device.free` returns them."""
    dev = pool.device
    plain = dev.num_free - dev.num_cached_free
    return dev.allocate(min(want, plain))


class LatencyFit:
    """The start-up grid, timed one shape per `step` (module doc)."""

    def __init__(
        self,
        runner: ModelRunner,
        max_batch_tokens: int,
        max_num_seqs: int,
        name: str,
        where: Path | None,
        measure: Measure | None = None,
    ) -> None:
        self.runner, self.name, self.where = runner, name, where
        self.measure = measure if measure is not None else time_one
        self.max_batch_tokens, self.max_num_seqs = max_batch_tokens, max_num_seqs
        self.specs = startup_grid(max_batch_tokens, runner.max_model_len)
        self.samples: list[profiler.Sample] = []
        self.done = threading.Event()  # set by the engine once it switched (or gave up)
        self.result: LatencyProfile | None = None

    def step(self, pool: BlockPool) -> LatencyProfile | None:
        """Time the next shape on borrowed blocks (none free: try again later); after
        the last one, time the host link, fit, cache, and return the profile."""
        if len(self.samples) < len(self.specs):
            spec = self.specs[len(self.samples)]
            blocks = borrow_device(pool, profiler.blocks_needed(self.runner, spec))
            if not blocks:
                return None
            try:
                seconds = self.measure(self.runner, spec, blocks)
            finally:
                pool.device.free(blocks)
            self.samples.append(profiler.Sample(profiler.shape_of(*spec), seconds))
            self._progress()
            return None
        return self._finish(pool)

    def advance(self, pool: BlockPool, switch: Callable[[LatencyProfile, str], None]) -> bool:
        """One `step` between engine steps; True once the fit is over: fitted (the
        engine switched to the profile through `switch`) or failed (one warning)."""
        try:
            prof = self.step(pool)
        except Exception as exc:  # a failed fit never stops serving
            self.fail(exc)
            return True
        if prof is None:
            return False
        switch(prof, "fitted")
        self.done.set()
        return True

    def _progress(self) -> None:
        done, total = len(self.samples), len(self.specs)
        if done % max(1, total // 4) == 0 or done == total:
            log.info(
                "profiling the engine's latency in the background: %d/%d batch shapes "
                "(serving meanwhile with the placeholder model)", done, total,
            )  # fmt: skip

    def _finish(self, pool: BlockPool) -> LatencyProfile:
        bandwidth = self._swap_bandwidth(pool) or 1e9
        res = profiler.fit_result(
            self.runner, self.name, self.samples, bandwidth, self.max_batch_tokens
        )
        log.info("%s", quality_line(res))
        prof = replace(res.profile, max_num_seqs=self.max_num_seqs)
        if self.where is not None:
            write_cached(self.where, prof)
        self.result = prof
        return prof

    def _swap_bandwidth(self, pool: BlockPool) -> float:
        want = min(SWAP_BLOCKS, pool.host.num_free)
        if want <= 0:
            return 0.0
        dev = borrow_device(pool, want)
        host = pool.host.allocate(len(dev))
        try:
            return profiler.measure_swap_bandwidth(
                self.runner, pairs=list(zip(dev, host, strict=True))
            )
        finally:
            pool.host.free(host)
            pool.device.free(dev)

    def fail(self, exc: BaseException) -> None:
        """The fit raised: keep the model in use (one warning line)."""
        log.warning(
            "latency model: the background fit failed (%s: %s); keeping the placeholder "
            "model (fit one with `augserve profile` and pass --profile FILE)",
            type(exc).__name__, exc,
        )  # fmt: skip
        self.done.set()
