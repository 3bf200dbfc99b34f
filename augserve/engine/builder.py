"""Build an `LLMEngine` from a model directory and a handful of options (after vLLM's
`EngineArgs`). The offline `LLM`, the server and the bench backend all build
their engines here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from augserve.core.config import SchedulerConfig
from augserve.core.latency import LatencyModel
from augserve.core.pace import PaceConfig
from augserve.engine.background_fit import LatencyFit, SwitchableLatency
from augserve.engine.engine import LLMEngine
from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.latency_default import default_latency
from augserve.engine.model_runner import ModelRunner
from augserve.engine.resolve import resolve_model
from augserve.engine.runner_config import RunnerConfig
from augserve.engine.startup_profile import cache_path, read_cached, startup_latency
from augserve.engine.tokenizer import Tokenizer
from augserve.engine.warmup import warm_up
from augserve.predict.base import make_predictor

DEFAULT_DEVICE_BLOCKS = 512
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineArgs:
    """Everything needed to build an engine. KV memory: `num_device_blocks` or
    `kv_cache_memory` (bytes) or `gpu_memory_utilization` (a fraction of the device's
    memory, or of the free RAM on CPU: `kv_budget.py`); default 512 blocks. Host swap
    pool: `num_host_blocks` or `swap_space` (bytes). `profile`: a shipped profile name
    or JSON file for the scheduler's latency model; without one, `fit_latency` fits it
    to this engine at start-up (cached per model and machine, `startup_profile.py`;
    with `fit_in_background`, while the engine already serves: `background_fit.py`),
    else the rough placeholder of `default_latency`. `predictor`: `online` (learned
    from the engine's own requests and calls) by default; only `oracle` reads
    scripted plans.
    `scheduler`: further `SchedulerConfig` fields. `enable_prefix_caching`: automatic
    prefix caching (vLLM's `--enable-prefix-caching`); None takes the policy's default:
    off for the paper's policies as the paper ran them (`augserve` and its baselines),
    on for `augserve-slo`, `vllm-apc` and `continuum`. `augserve serve` turns it on for
    every policy unless `--no-enable-prefix-caching`. `session_ttl`:
    how long a request that ended with "tool_calls" keeps its KV as a paused client
    session (`sched/sessions.py`; 0: it finishes at the call). `pace_window` > 0: the
    latency model follows the pace measured on the engine's own iterations, read every
    that many busy steps (`engine_pace.py`; 0, the default: the profile as it is)."""

    model: str
    policy: str = "augserve"
    dtype: str | None = None
    device: str | None = None
    block_size: int = 16
    num_device_blocks: int | None = None
    kv_cache_memory: int | None = None
    gpu_memory_utilization: float | None = None  # used when neither of the two above is set
    num_host_blocks: int = 0
    swap_space: int | None = None
    max_model_len: int | None = None
    max_batch_tokens: int = 512
    max_num_seqs: int = 256
    predictor: str = "online"
    profile: str | None = None
    fit_latency: bool = False
    fit_in_background: bool = False  # with fit_latency and no cached fit: after start-up
    num_threads: int | None = None
    compile: bool | None = None  # torch.compile; None: `ops.compile_wanted` (off on CPU)
    seed: int = 0
    enable_prefix_caching: bool | None = None
    session_ttl: float = 600.0
    pace_window: int = 0  # > 0: the latency model follows the measured pace (`engine_pace.py`)
    scheduler: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError(
                "EngineArgs.model must name a model (a directory, FILE.gguf or smollm2)"
            )
        for name in ("block_size", "max_batch_tokens", "max_num_seqs"):
            if getattr(self, name) < 1:
                raise ValueError(f"EngineArgs.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("num_device_blocks", "kv_cache_memory", "max_model_len", "num_threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"EngineArgs.{name} must be >= 1, got {value}")
        for name in ("num_host_blocks", "swap_space", "pace_window"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"EngineArgs.{name} must be >= 0, got {value}")
        if self.num_device_blocks is not None and self.kv_cache_memory is not None:
            raise ValueError("EngineArgs: give num_device_blocks or kv_cache_memory, not both")
        util = self.gpu_memory_utilization
        if util is not None and not 0.0 < util <= 1.0:
            raise ValueError(f"EngineArgs.gpu_memory_utilization must be in (0, 1], got {util}")
        known = {f.name for f in fields(SchedulerConfig)}
        for key in self.scheduler:
            if key not in known:
                raise ValueError(f"EngineArgs.scheduler: unknown SchedulerConfig field {key!r}")

    def scheduler_config(self) -> SchedulerConfig:
        extra = dict(self.scheduler)
        if self.enable_prefix_caching is not None:
            extra.setdefault("enable_prefix_caching", self.enable_prefix_caching)
        extra.setdefault("session_ttl", self.session_ttl)
        return SchedulerConfig(
            policy=self.policy,
            block_size=self.block_size,
            max_batch_tokens=self.max_batch_tokens,
            max_num_seqs=self.max_num_seqs,
            predictor=self.predictor,
            **extra,
        )


def load_latency(profile: str | Path | LatencyModel | None) -> LatencyModel | None:
    """A latency model given as an object, a shipped profile name or a JSON path."""
    if profile is None or not isinstance(profile, str | Path):
        return profile
    from augserve.profiles import load_profile

    return load_profile(profile)


def _kv_from_utilization(args: EngineArgs) -> int:
    """Build the model with one KV block, measure what its weights leave of the
    device's memory, and return the KV bytes `gpu_memory_utilization` allows."""
    import gc

    import torch

    from augserve.engine import kv_budget

    assert args.gpu_memory_utilization is not None
    kv = KVCacheConfig(args.block_size, 1, None, 0)
    probe = ModelRunner(RunnerConfig(args.model, args.dtype, args.device, kv, args.num_threads))
    free, total = kv_budget.device_memory(probe.device)
    weights = kv_budget.model_bytes(probe.model)
    acts = kv_budget.activation_bytes(probe.model, args.max_batch_tokens)
    device = probe.device
    del probe
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return kv_budget.kv_cache_bytes(args.gpu_memory_utilization, device, free, total, weights, acts)


def build_runner(args: EngineArgs) -> ModelRunner:
    args = replace(args, model=resolve_model(args.model))
    sized = args.num_device_blocks is not None or args.kv_cache_memory is not None
    if args.gpu_memory_utilization is not None and not sized:
        args = replace(args, kv_cache_memory=_kv_from_utilization(args))
    device_blocks = args.num_device_blocks
    if device_blocks is None and args.kv_cache_memory is None:
        device_blocks = DEFAULT_DEVICE_BLOCKS
    host_blocks = args.num_host_blocks
    kv = KVCacheConfig(args.block_size, device_blocks, args.kv_cache_memory, host_blocks)
    runner = ModelRunner(_runner_config(args, kv))
    if args.swap_space:  # bytes -> blocks needs the model's KV size: build once more
        host = args.swap_space // (runner.kv_bytes_per_token * args.block_size)
        kv = KVCacheConfig(args.block_size, runner.num_device_blocks, None, host)
        del runner
        runner = ModelRunner(_runner_config(args, kv))
    warm_up(runner)  # a compiled runner compiles here, before anything is served
    return runner


def _runner_config(args: EngineArgs, kv: KVCacheConfig) -> RunnerConfig:
    return RunnerConfig(
        args.model, args.dtype, args.device, kv, args.num_threads, compile=args.compile
    )


def build_engine(
    args: EngineArgs,
    latency: LatencyModel | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> LLMEngine:
    """Load the model, size the KV cache and wire the scheduler, tokenizer and predictor.
    `args.model`: anything `resolve.resolve_model` takes (a directory, FILE.gguf, smollm2)."""
    args = replace(args, model=resolve_model(args.model))
    runner = build_runner(args)
    config = args.scheduler_config()
    latency, source = resolve_latency(args, runner, config, latency)
    log.info("latency model: %s (%s)", getattr(latency, "name", type(latency).__name__), source)
    fit_now = isinstance(latency, SwitchableLatency)
    if args.pace_window and not fit_now:
        latency = SwitchableLatency(latency)  # the pace swaps the model under the scheduler
    engine = LLMEngine(
        runner,
        config,
        Tokenizer(args.model),
        latency,
        make_predictor(args.predictor, seed=args.seed),
        clock=clock,
        max_model_len=args.max_model_len,
    )
    engine.latency_source = source
    if args.pace_window:
        engine.follow_pace(PaceConfig(window=args.pace_window))
    if fit_now:  # no cached fit: fit while serving
        where = cache_path(runner, config, args.model, None)
        engine.latency_fit = LatencyFit(
            runner, config.max_batch_tokens, config.max_num_seqs, Path(args.model).name, where
        )
        log.info(
            "latency model: no cached fit for this engine and machine; the server starts "
            "with the placeholder and fits in the background (--profile default: no fit)"
        )
    return engine


def resolve_latency(
    args: EngineArgs, runner: ModelRunner, config: SchedulerConfig, given: LatencyModel | None
) -> tuple[LatencyModel, str]:
    """The latency model and its source: "file" (given, or `profile`: always wins),
    "cached" or "fitted" (`fit_latency`), else "default" (the placeholder). With
    `fit_in_background` and no cached fit: the placeholder behind a `SwitchableLatency`,
    which the engine's background fit replaces (`background_fit.py`)."""
    explicit = given or load_latency(args.profile)
    if explicit is not None:
        return explicit, "file"
    if args.fit_latency and args.fit_in_background:
        cached = read_cached(cache_path(runner, config, args.model, None))
        if cached is not None:
            return cached, "cached"
        return SwitchableLatency(default_latency(runner, config)), "default"
    if args.fit_latency:
        return startup_latency(runner, config, args.model)
    return default_latency(runner, config), "default"
