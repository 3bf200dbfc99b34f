"""The scheduler's latency model, fitted to this engine at start-up and cached.

As vLLM profiles memory when it starts, the engine times a short grid of batch
shapes (`startup_grid`: 12 prefills, decode batches and a mix, each the faster of two
runs after a warm-up; seconds on a small model, with a progress line in the log),
fits `LatencyProfile` to them (`profiler.profile_runner`) and measures the host
link; `quality_line` says in words how good the fit is. The result is cached
under `$XDG_CACHE_HOME/augserve/latency/` (as the default model is), keyed by
the model files, dtype, device, thread count, KV layout, batch limit, machine
and the profiler's own source, so the next start on the same machine reuses it;
a bad cache file (corrupt, or a NaN) is refitted (`read_cached`). The server fits
after it answers (`background_fit.py`).

`resolve_latency` says where the model came from: "file" (`--profile`, which
always wins), "cached", "fitted", or "default" (the placeholder of
`latency_default.py`, when fitting is off).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import platform
from dataclasses import replace
from pathlib import Path
from typing import Any

from augserve.core.config import SchedulerConfig
from augserve.core.latency import LatencyProfile
from augserve.engine import profiler
from augserve.engine.model_runner import ModelRunner

log = logging.getLogger(__name__)
SOURCES = ("fitted", "cached", "file", "default")
_VERSION = 1


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "augserve" / "latency"


def startup_grid(max_batch_tokens: int, max_context: int) -> list[profiler.BatchSpec]:
    """A dozen small batch shapes, each term of the model varied: prefills of 16-256
    tokens, one at an offset (attention), decode batches of 1, 4 and 16 at two context
    lengths, one mix, and two shapes at a long context (up to 1,536 tokens), where an
    agent's turn resumes after a tool call: a chunk over it and decodes on it. Without
    these the fit extrapolated from 512 tokens and priced q4's served iterations at
    about half their time (docs/results-vs-vllm.md)."""
    top = min(max_batch_tokens, 256, max_context - 1)
    sizes = sorted({n for n in (16, 64, top) if 0 < n <= top})
    ctxs = [c for c in (64, 512) if c < max_context - 1]
    specs: list[profiler.BatchSpec] = [([(n, 0)], []) for n in sizes]
    if ctxs and ctxs[-1] + 64 < max_context:
        specs.append(([(64, ctxs[-1])], []))
    for b in (1, 4, 16):
        if b > max_batch_tokens:
            continue
        specs.extend(([], [c] * b) for c in ctxs)
    if ctxs and max_batch_tokens >= 64 + 4:
        specs.append(([(64, 0)], [ctxs[0]] * 4))
    far = min(1536, max_context - top - 1)
    if ctxs and far >= 2 * ctxs[-1]:
        specs.append(([(top, far)], []))
        specs.extend(([], [far] * b) for b in (4,) if b <= max_batch_tokens)
    return specs


def _model_identity(model: str) -> dict[str, Any]:
    path = Path(model)
    files = [path] if path.is_file() else sorted(p for p in path.glob("*") if p.is_file())
    return {
        "model": str(path.resolve()),
        "files": [(p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in files],
    }


def cache_key(runner: ModelRunner, config: SchedulerConfig, model: str) -> str:
    import torch

    facts = {
        "version": _VERSION,
        **_model_identity(model),
        "dtype": str(runner.dtype),
        "device": str(runner.device),
        "cuda": torch.cuda.get_device_name(runner.device) if runner.device.type == "cuda" else "",
        "threads": torch.get_num_threads(),
        "block_size": runner.block_size,
        "device_blocks": runner.num_device_blocks,
        "host_blocks": runner.num_host_blocks,
        "max_batch_tokens": config.max_batch_tokens,
        "machine": [platform.node(), platform.machine(), platform.processor(), os.cpu_count()],
        "profiler": hashlib.sha256(inspect.getsource(profiler).encode()).hexdigest(),
        "grid": hashlib.sha256(inspect.getsource(startup_grid).encode()).hexdigest(),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:20]


def quality_line(res: profiler.ProfileResult) -> str:
    """The fit-quality log line, in words a user can act on."""
    mean, worst = 100 * res.mean_error, 100 * res.max_error
    line = (
        f"latency model fitted to {len(res.train)} batch shapes; on {len(res.test)} more "
        f"held out it predicts step times within {mean:.0f}% on average (worst {worst:.0f}%)"
    )
    if res.mean_error <= LARGE_ERROR:
        return line + ": the scheduler's time estimates are close to this machine's"
    return line + (
        ": a large error means the timings were noisy (a busy machine: other processes "
        "took the CPU while a shape was timed) and the scheduler's time estimates are "
        "rough; requests are still served correctly, only the ordering is less informed. "
        "Restart on a quieter machine to refit (delete the cache file below), fit once "
        "with `augserve profile --out FILE` and pass --profile FILE, or skip the fit "
        "with --profile default"
    )


LARGE_ERROR = 0.5  # a mean held-out error above this gets the explanation


def fit_startup_profile(runner: ModelRunner, config: SchedulerConfig, name: str) -> LatencyProfile:
    """Time the start-up grid and fit (logging progress)."""
    specs = startup_grid(config.max_batch_tokens, runner.max_model_len)
    step = max(1, len(specs) // 4)

    def progress(done: int, total: int) -> None:
        if done % step == 0 or done == total:
            log.info("profiling the engine's latency: %d/%d batch shapes", done, total)

    res = profiler.profile_runner(
        runner, name, config.max_batch_tokens, repeats=2, progress=progress, specs=specs
    )
    log.info("%s", quality_line(res))
    return replace(res.profile, max_num_seqs=config.max_num_seqs)


def cache_path(runner: ModelRunner, config: SchedulerConfig, model: str, root: Path | None) -> Path:
    return (root or cache_dir()) / f"{cache_key(runner, config, model)}.json"


def read_cached(where: Path) -> LatencyProfile | None:
    """The cached fit at `where`, or None: missing, unreadable, corrupt or holding a
    non-finite number (each but the first one warning line; the caller refits)."""
    try:
        text = where.read_text()
    except (FileNotFoundError, NotADirectoryError):  # no cache yet (the write will say)
        return None
    except OSError as exc:
        log.warning("latency model: cannot read the cache file %s (%s); refitting", where, exc)
        return None
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        prof = LatencyProfile.from_dict(data, source=str(where))
    except ValueError as exc:
        log.warning("latency model: ignoring a bad cache file %s (%s); refitting", where, exc)
        return None
    log.info("latency model: cached fit %s", where)
    return prof


def write_cached(where: Path, prof: LatencyProfile) -> None:
    """Cache a fit atomically; a full or read-only disk is one warning line."""
    tmp = where.with_suffix(f".{os.getpid()}.tmp")
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(prof.to_dict(), indent=2) + "\n")
        tmp.replace(where)
    except OSError as exc:
        log.warning("latency model: fitted, but not cached at %s (%s)", where, exc)
        with contextlib.suppress(OSError):
            tmp.unlink()
        return
    log.info("latency model: fit cached at %s (the next start reuses it)", where)


def startup_latency(
    runner: ModelRunner, config: SchedulerConfig, model: str, root: Path | None = None
) -> tuple[LatencyProfile, str]:
    """The cached fit for this engine and machine, else a new fit (then cached)."""
    where = cache_path(runner, config, model, root)
    prof = read_cached(where)
    if prof is not None:
        return prof, "cached"
    prof = fit_startup_profile(runner, config, Path(model).name)
    write_cached(where, prof)
    return prof, "fitted"
