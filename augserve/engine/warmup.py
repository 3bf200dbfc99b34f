"""Compile before serving: a compiled runner's graphs are built at start-up, never on
the request path (issue 34).

A compiled `ModelRunner` has two kinds of graphs (`model_runner.run_model`): one for
steps of decodes only (the whole model, batch size and block-table width dynamic),
and the layers' fused regions for steps with prefill chunks (the token count
dynamic). `warm_up` runs one step of each kind at sizes that are not special to
torch's symbolic shapes (no 0, no 1: `ops.dynamic_shape_settings`), so every later
batch size, context width and prompt length reuses those graphs: no step of a live
engine ever waits for a recompile (`compile_count` lets a test check it). Progress is
announced (`announce`): the log when logging is set up (the server), else stderr
(`augserve generate`, `LLM()` in a script). Inductor's compiled artifacts are cached
across runs under `~/.cache/augserve/inductor` (`use_cache_dir`), so a later start
skips the code generation (dynamo still traces: tens of seconds on a busy CPU).

On CPU compilation is off by default (`ops.compile_wanted`): on the 2-core machine it
was measured on, a cold compile of SmolLM2 took minutes and the compiled steps were not
faster enough to pay for it (docs/engine-speed.md, "Compilation").

An eager runner runs the same steps, silently: a fresh process pays first-use costs on
its first step, and they belonged in no request's TTFT. The largest was an import: the
first call of a custom op (the prepacked fp32 linear) imports `torch._dynamo`, 1.9 s on
a 2-core AMD EPYC, and a fresh server's first request took 1.4 s to its first token
against 0.29 s for the next of the same length (docs/results-vs-vllm.md, "A fresh
server's first requests"). The steps run under `torch.random.fork_rng`, so warming up
draws nothing from the random streams later requests sample from.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import torch

from augserve.engine.model_runner import ModelRunner, SeqChunk

log = logging.getLogger(__name__)
_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


def announce(msg: str) -> None:
    """INFO in the log if logging is configured, else one line on stderr."""
    if logging.getLogger().hasHandlers():
        log.info("%s", msg)
    else:
        print(f"augserve: {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "augserve" / "inductor"


def use_cache_dir() -> str | None:
    """Point inductor's on-disk cache (FX graphs, kernels) at augserve's cache dir
    unless TORCHINDUCTOR_CACHE_DIR is set; an unwritable dir is one warning line (and
    inductor's own default is kept)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    given = os.environ.get(_CACHE_ENV)
    # importing inductor's config writes its default into the variable: not a choice
    if given and os.path.abspath(given) != os.path.abspath(default_cache_dir()):
        return given
    where = cache_dir()
    try:
        where.mkdir(parents=True, exist_ok=True)
        probe = where / f".probe.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        log.warning("compile cache: %s is not writable (%s); using torch's default", where, exc)
        return None
    os.environ[_CACHE_ENV] = str(where)
    return str(where)


def compile_count() -> int:
    """Frames torch has compiled in this process (recompiles included)."""
    from torch._dynamo.utils import counters

    return int(sum(counters["frames"].values()))


def _chunk(runner: ModelRunner, i: int, n: int, start: int) -> SeqChunk:
    bs, nblocks = runner.block_size, runner.num_device_blocks
    need = -(-(start + n) // bs)
    table = [(3 * i + j) % nblocks for j in range(need)]  # garbage KV: nothing is served yet
    ids = [(7 * i + k) % max(1, runner.vocab_size - 3) + 3 for k in range(n)]
    return SeqChunk(f"warmup-{i}", ids, start, table, sample=True)


def warm_up_steps(runner: ModelRunner) -> list[list[SeqChunk]]:
    """The steps that build every graph: decodes only (3 sequences, two block widths),
    a prefill alone, and prefills mixed with decodes."""
    bs = runner.block_size
    ctx = min(3 * bs, runner.max_model_len - 2)
    n = max(2, min(17, runner.max_model_len - 1))
    return [
        [_chunk(runner, i, 1, ctx - i) for i in range(3)],
        [_chunk(runner, i, 1, ctx // 2 + i) for i in range(2)],
        [_chunk(runner, 0, n, 0)],
        [_chunk(runner, 0, n, 0), _chunk(runner, 1, 1, ctx), _chunk(runner, 2, 1, ctx - 1)],
    ]


def warm_up(runner: ModelRunner) -> None:
    """Run the warm-up steps now (module doc): a compiled runner compiles its graphs,
    with progress lines; an eager one pays its first-use costs. Call it before serving:
    its steps write garbage into the KV cache."""
    devices = [runner.device] if runner.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        if runner.compiled:
            _compile(runner)
        else:
            for chunks in warm_up_steps(runner):
                runner.execute(chunks)


def _compile(runner: ModelRunner) -> None:
    where = use_cache_dir()
    steps = warm_up_steps(runner)
    announce(
        f"compiling the model for {runner.device.type} before serving (one-off; cached "
        f"under {where or 'torch defaults'}; --no-compile / AUGSERVE_COMPILE=0 skips it)"
    )
    t0 = time.perf_counter()
    for i, chunks in enumerate(steps):
        runner.execute(chunks)
        announce(f"compiling: {i + 1}/{len(steps)} step shapes ({time.perf_counter() - t0:.0f} s)")
    if runner.device.type == "cuda":
        torch.cuda.synchronize(runner.device)
