"""`augserve profile`: fit a LatencyProfile to the real engine.

Iteration times are measured over a grid of batch shapes (prefill chunks at
several context offsets, decode batches at several context lengths, and mixes
of both), each the median of a few runs of `ModelRunner.execute`. The linear
model of `augserve.core.latency.LatencyProfile`

    t = c0 + c_prefill * prefill_tokens + c_attn * prefill_attn
          + c_decode * decode_reqs + c_ctx * decode_context

is fitted by non-negative least squares on relative error over a training
split; the held-out split reports how well it predicts. Swap bandwidth is
measured by timing block copies each way. The result is a JSON file that
`augserve.profiles.load_profile` reads.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from augserve.core.latency import BatchShape, LatencyProfile
from augserve.engine.model_runner import ModelRunner, SeqChunk
from augserve.engine.sampling_params import SamplingParams

_GREEDY = SamplingParams(temperature=0.0)
FEATURES = ("c0", "c_prefill", "c_attn", "c_decode", "c_ctx")
BatchSpec = tuple[list[tuple[int, int]], list[int]]  # prefill chunks (n, start), decode contexts


@dataclass(frozen=True)
class Sample:
    shape: BatchShape
    seconds: float


@dataclass
class ProfileResult:
    profile: LatencyProfile
    train: list[Sample]
    test: list[Sample]
    errors: list[float] = field(default_factory=list)  # held-out relative errors

    @property
    def mean_error(self) -> float:
        return float(np.mean(np.abs(self.errors))) if self.errors else 0.0

    @property
    def max_error(self) -> float:
        return float(np.max(np.abs(self.errors))) if self.errors else 0.0


# --- batches -------------------------------------------------------------------------------
def grid(max_batch_tokens: int, max_context: int, quick: bool = False) -> list[BatchSpec]:
    """Batch specs: (prefill chunks [(n, start)], decodes [context lens])."""
    sizes = [s for s in (16, 32, 64, 128, 256, 512, 1024, 2048) if s <= max_batch_tokens]
    ctxs = [c for c in (16, 64, 128, 256, 512, 1024) if c < max_context]
    dec_batches = (1, 2, 4, 8, 16, 32) if not quick else (1, 4, 16)
    specs: list[BatchSpec] = []
    for n in sizes:
        for start in [0, *ctxs[1::2]]:
            if start + n < max_context:
                specs.append(([(n, start)], []))
    for b in dec_batches:
        for c in ctxs:
            specs.append(([], [c] * b))
    for n in sizes[: 3 if quick else 4]:
        for b in (2, 8):
            for c in ctxs[::2]:
                if n + b <= max_batch_tokens:
                    specs.append(([(n, 0)], [c] * b))
    return specs


def shape_of(prefills: Sequence[tuple[int, int]], decodes: Sequence[int]) -> BatchShape:
    """The BatchShape `SchedulerOutput.batch_shape` would report for this batch."""
    prefill = sum(n for n, _ in prefills)
    attn = sum(n * s + n * (n + 1) // 2 for n, s in prefills)
    return BatchShape(prefill, attn, len(decodes), sum(c + 1 for c in decodes))


def batch_chunks(
    runner: ModelRunner,
    prefills: Sequence[tuple[int, int]],
    decodes: Sequence[int],
    blocks: Sequence[int] | None = None,
) -> list[SeqChunk]:
    """SeqChunks for a batch spec. Block tables wrap around `blocks` (default: the
    whole cache, fine before anything is served): contents are garbage and may
    collide, which costs the same time as real KV."""
    bs, next_block = runner.block_size, 0
    pool = list(blocks) if blocks is not None else range(runner.num_device_blocks)
    nblocks = len(pool)
    rng = random.Random(0)
    chunks = []
    for i, (n, start) in enumerate([*prefills, *((1, c) for c in decodes)]):
        need = -(-(start + n) // bs)
        table = [pool[(next_block + j) % nblocks] for j in range(need)]
        next_block = (next_block + need) % nblocks
        ids = [rng.randrange(3, runner.vocab_size) for _ in range(n)]
        chunks.append(SeqChunk(f"p{i}", ids, start, table, True, _GREEDY))
    return chunks


def blocks_needed(runner: ModelRunner, spec: BatchSpec) -> int:
    """Device blocks the batch's block tables cover (without wrapping)."""
    bs = runner.block_size
    return sum(-(-(s + n) // bs) for n, s in spec[0]) + sum(-(-(c + 1) // bs) for c in spec[1])


def time_batch(
    runner: ModelRunner,
    spec: BatchSpec,
    repeats: int,
    stat: str = "min",
    blocks: Sequence[int] | None = None,
) -> float:
    """Seconds for one `execute` of the batch: the min (noise on a shared machine only
    ever adds time) or the median of `repeats` runs after a warm-up. `blocks`: the
    device blocks it may write (`batch_chunks`)."""
    chunks = batch_chunks(runner, *spec, blocks=blocks)
    runner.execute(chunks)  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        runner.execute(chunks)
        times.append(time.perf_counter() - t)
    return min(times) if stat == "min" else statistics.median(times)


def measure_swap_bandwidth(
    runner: ModelRunner,
    blocks: int = 64,
    repeats: int = 5,
    pairs: Sequence[tuple[int, int]] | None = None,
) -> float:
    """Bytes per second over the host link (mean of both directions, median of runs).
    `pairs`: the (device, host) blocks to copy (default: the first `blocks` of each,
    fine before anything is served); 0.0 with none."""
    if pairs is None:
        n = min(blocks, runner.num_device_blocks, runner.num_host_blocks)
        pairs = [(i, i) for i in range(n)]
    pairs = list(pairs)
    n = len(pairs)
    if n <= 0:
        return 0.0
    back = [(h, d) for d, h in pairs]
    nbytes = n * runner.block_size * runner.kv_bytes_per_token
    times = []
    for _ in range(repeats + 1):
        t = time.perf_counter()
        runner.swap_out(pairs)
        runner.swap_in(back)
        _sync(runner)
        times.append((time.perf_counter() - t) / 2)
    return nbytes / statistics.median(times[1:])


def _sync(runner: ModelRunner) -> None:
    if runner.device.type == "cuda":
        import torch

        torch.cuda.synchronize()


# --- fit ------------------------------------------------------------------------------------
def _features(shape: BatchShape) -> list[float]:
    return [1.0, shape.prefill_tokens, shape.prefill_attn, shape.decode_reqs, shape.decode_context]


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with x >= 0: drop the most negative coefficient and refit."""
    active = list(range(a.shape[1]))
    x = np.zeros(a.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(a[:, active], b, rcond=None)
        if (sol >= 0).all():
            x[active] = sol
            return x
        del active[int(np.argmin(sol))]
    return x


def fit(samples: Sequence[Sample]) -> dict[str, float]:
    """Coefficients minimizing relative squared error, all >= 0."""
    a = np.array([_features(s.shape) for s in samples], dtype=float)
    t = np.array([s.seconds for s in samples], dtype=float)
    scale = np.maximum(a.max(axis=0), 1.0)  # condition the columns
    w = 1.0 / t
    x = nnls(a / scale * w[:, None], np.ones_like(t)) / scale
    return dict(zip(FEATURES, (float(v) for v in x), strict=True))


def relative_errors(profile: LatencyProfile, samples: Sequence[Sample]) -> list[float]:
    return [profile.iteration_time(s.shape) / s.seconds - 1.0 for s in samples]


# --- the whole run ----------------------------------------------------------------------------
def profile_runner(
    runner: ModelRunner,
    name: str,
    max_batch_tokens: int = 512,
    repeats: int = 3,
    holdout: float = 0.25,
    seed: int = 0,
    quick: bool = False,
    stat: str = "min",
    progress: Callable[[int, int], None] | None = None,
    specs: Sequence[BatchSpec] | None = None,
) -> ProfileResult:
    """Measure `specs` (default: `grid`), fit, and report the held-out error.
    `progress(done, total)` is called after each batch shape."""
    max_context = runner.max_model_len
    if specs is None:
        specs = grid(max_batch_tokens, max_context, quick)
    samples = []
    for i, spec in enumerate(specs):
        samples.append(Sample(shape_of(*spec), time_batch(runner, spec, repeats, stat)))
        if progress is not None:
            progress(i + 1, len(specs))
    bandwidth = measure_swap_bandwidth(runner) or 1e9
    return fit_result(runner, name, samples, bandwidth, max_batch_tokens, holdout, seed)


def fit_result(
    runner: ModelRunner,
    name: str,
    samples: Sequence[Sample],
    bandwidth: float,
    max_batch_tokens: int,
    holdout: float = 0.25,
    seed: int = 0,
) -> ProfileResult:
    """Fit the measured samples (a random `holdout` share held out to report the error)."""
    samples = list(samples)
    rng = random.Random(seed)
    rng.shuffle(samples)
    k = max(1, int(len(samples) * holdout))
    test, train = samples[:k], samples[k:]
    coef = fit(train)
    kv = runner.kv_bytes_per_token
    prof = LatencyProfile(
        name=name,
        c0=coef["c0"],
        c_prefill=coef["c_prefill"],
        c_attn=coef["c_attn"],
        c_decode=coef["c_decode"],
        c_ctx=coef["c_ctx"],
        kv_bytes=kv,
        device_kv_bytes=runner.num_device_blocks * runner.block_size * kv,
        host_kv_bytes=runner.num_host_blocks * runner.block_size * kv,
        swap_bandwidth=bandwidth,
        max_batch_tokens=max_batch_tokens,
    )
    errors = relative_errors(prof, test)
    res = ProfileResult(prof, train, test, errors)
    desc = (
        f"fitted by augserve profile on {runner.device.type} ({runner.dtype}); "
        f"{len(train)} training / {len(test)} held-out batches; held-out error "
        f"mean {res.mean_error:.1%}, max {res.max_error:.1%}"
    )
    res.profile = replace(prof, description=desc)
    return res
