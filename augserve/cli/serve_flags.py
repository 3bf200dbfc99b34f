"""`augserve serve`'s flags for the model and server, the engine and KV cache, and the
scheduler (names follow vLLM where it has them); tenants and request limits are in
`augserve/cli/serve_limits.py`."""

from __future__ import annotations

import argparse

from augserve.cli import args as argtypes
from augserve.cli.serve_limits import add_key_flags
from augserve.engine.tool_parsers import PARSER_CHOICES

DTYPES = {
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


_positive_int = argtypes.positive_int
_positive_float = argtypes.positive_float
_fraction = argtypes.fraction
_bytes = argtypes.byte_size


def _port(text: str) -> int:
    value = _positive_int(text) if text != "0" else 0
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0..65535)")
    return value


D = " (default: %(default)s)"


def model_flags(p: argparse.ArgumentParser) -> None:
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
        "--malloc-tuning", action=argparse.BooleanOptionalAction, default=True,
        help="glibc: fixed mmap (32 MiB) and trim (64 MiB) thresholds, at most 2 arenas, "
        "and malloc_trim after a "
        "request body of 256 KiB or more, so large transient requests do not grow RSS "
        "(docs/server.md)" + D,
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
        "--middleware", action="append", default=None, metavar="MODULE.NAME",
        help="an ASGI middleware class or async HTTP middleware to add, outermost, as "
        "vLLM's --middleware (repeatable)",
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


def engine_flags(p: argparse.ArgumentParser) -> None:
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
    g.add_argument("--dtype", default="auto", choices=sorted(DTYPES), help="weights and KV" + D)
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


def scheduler_flags(p: argparse.ArgumentParser) -> None:
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
        "--pace-window", type=argtypes.int_arg(0), default=0, metavar="N",
        help="price with the profile scaled by the pace the engine measures on its own "
        "iterations, read every N busy iterations (0: off; docs/scheduler.md)" + D,
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
