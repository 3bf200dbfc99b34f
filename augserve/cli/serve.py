"""`augserve serve`: the OpenAI-compatible server (flag names follow vLLM where it has them).

    augserve serve --model DIR --policy augserve --tools tools.yaml --port 8000

Without --model it serves SmolLM2-135M-Instruct (fetched once from PyPI, cached), or the
random-weight embedded model when there is no network (`server/default_model.py`).
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from augserve.cli import args as argtypes

API_KEY_ENV = "AUGSERVE_API_KEY"
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


def _port(text: str) -> int:
    value = _positive_int(text) if text != "0" else 0
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0..65535)")
    return value


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="OpenAI-compatible HTTP server whose tools run inside the engine",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        default=None,
        help="model directory, FILE.gguf or 'smollm2' (default: SmolLM2, fetched once; "
        "the random-weight embedded model without a network)",
    )
    p.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        help="name(s) clients use (default: the --model value)",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8000)
    p.add_argument(
        "--api-key",
        default=None,
        help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV})",
    )
    p.add_argument("--tools", default=None, metavar="FILE", help="server-side tools (YAML/JSON)")
    p.add_argument("--policy", default="augserve", help="scheduling policy")
    p.add_argument("--predictor", default="oracle", help="oracle, noisy:P or learned:DIR")
    p.add_argument("--chat-template", default=None, metavar="FILE")
    p.add_argument(
        "--tool-call-parser",
        default=None,
        choices=("hermes", "llama3_json"),
        help="default: from the chat template",
    )
    p.add_argument("--max-model-len", type=_positive_int, default=None)
    p.add_argument("--dtype", default="auto", choices=sorted(_DTYPES))
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--block-size", type=_positive_int, default=16)
    p.add_argument("--num-device-blocks", type=_positive_int, default=None)
    p.add_argument("--kv-cache-memory", type=_positive_int, default=None, help="bytes")
    p.add_argument("--swap-space", type=_positive_float, default=None, help="host KV in GiB")
    p.add_argument("--max-num-batched-tokens", type=_positive_int, default=512)
    p.add_argument("--max-num-seqs", type=_positive_int, default=256)
    p.add_argument("--profile", default=None, help="latency profile JSON for the scheduler")
    p.add_argument("--threads", type=_positive_int, default=None, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--max-tokens-limit",
        type=_positive_int,
        default=None,
        help="largest max_tokens a request may ask for",
    )
    p.add_argument("--max-body-bytes", type=_positive_int, default=4 * 1024 * 1024)
    p.add_argument(
        "--shutdown-grace",
        type=float,
        default=10.0,
        help="seconds running requests get to finish on SIGINT/SIGTERM",
    )
    p.add_argument(
        "--slo-ttft", type=_positive_float, default=1.0,
        help="the SLO's time to first token, seconds (metrics, and augserve-slo's triage)",
    )  # fmt: skip
    p.add_argument(
        "--slo-norm-latency", type=_positive_float, default=0.1,
        help="the SLO's normalized latency, seconds per generated token (as --slo-ttft)",
    )  # fmt: skip
    argtypes.add_set_option(p, "slo_reserve=0 or beta=1e-6")
    p.add_argument(
        "--allow-scripted-tools",
        action="store_true",
        help="accept scripted tool plans (augserve_segments) on /v1/completions (benchmarks)",
    )
    p.add_argument(
        "--log-level", default="info", choices=("critical", "error", "warning", "info", "debug")
    )
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


def _serve(args: argparse.Namespace) -> int:
    from augserve.core.metrics import SLOConfig
    from augserve.engine.async_engine import AsyncLLMEngine
    from augserve.engine.builder import EngineArgs, build_engine
    from augserve.engine.resolve import resolve_model
    from augserve.server.default_model import default_model
    from augserve.server.launch import ServeOptions, build_state, serve_forever
    from augserve.server.state import ServerLimits

    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    model = args.model
    names = args.served_model_name
    if model is None:
        default_dir, default_names = default_model()
        model = str(default_dir)
        names = names or default_names
    else:
        model = resolve_model(model)
    names = names or [args.model]
    swap = int(args.swap_space * 2**30) if args.swap_space else None
    dtype = _DTYPES[args.dtype] if args.dtype != "auto" else _auto_dtype(model)
    eargs = EngineArgs(
        model=model,
        policy=args.policy,
        dtype=dtype,
        device=args.device,
        block_size=args.block_size,
        num_device_blocks=args.num_device_blocks,
        kv_cache_memory=args.kv_cache_memory,
        swap_space=swap,
        max_model_len=args.max_model_len,
        max_batch_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        predictor=args.predictor,
        profile=args.profile,
        num_threads=args.threads,
        seed=args.seed,
        scheduler=scheduler_overrides(args),
    )
    limits = ServerLimits(
        args.max_body_bytes, args.max_tokens_limit, shutdown_grace=args.shutdown_grace
    )
    opts = ServeOptions(
        tuple(names),
        args.tools,
        args.chat_template,
        args.tool_call_parser,
        limits,
        SLOConfig(args.slo_norm_latency, args.slo_ttft),
        allow_scripted_tools=args.allow_scripted_tools,
    )
    aengine = AsyncLLMEngine(build_engine(eargs))
    state = build_state(aengine, model, opts)
    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    return serve_forever(state, args.host, args.port, api_key, args.log_level)
