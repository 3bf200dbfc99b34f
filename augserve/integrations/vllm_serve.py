"""Building vLLM's `AsyncLLM` for `augserve serve --engine vllm` from our serve flags.

`engine_kwargs` (no vLLM import) maps the flags to vLLM's `AsyncEngineArgs`, with
`AugServeScheduler` as `scheduler_cls` and our scheduler flags as its options
(`--additional-config '{"augserve": ...}'`, docs/vllm-plugin.md); `--vllm-args`
adds any other engine argument (a JSON object; its `additional_config.augserve`
merges into ours). `build_vllm_engine` imports vLLM (a one-line ValueError when it
is not installed), starts the engine and wraps it in `VllmAsyncEngine`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
from typing import Any

from augserve.integrations.vllm_face import VllmFace, VllmStats

log = logging.getLogger("augserve.serve")
SCHEDULER = "augserve.integrations.vllm.AugServeScheduler"
_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
# our flags that vLLM's CPU or GPU engine has no counterpart for (a warning each)
_NOT_MAPPED = ("swap_space", "threads", "compile", "session_ttl", "pace_window")


def plugin_options(args: argparse.Namespace) -> dict[str, Any]:
    """The plugin's options (`integrations/options.py`) from our scheduler flags."""
    from augserve.bench.runner import parse_overrides

    opts: dict[str, Any] = {
        "policy": args.policy,
        "predictor": args.predictor,
        "slo_ttft": args.slo_ttft,
        "slo_norm_latency": args.slo_norm_latency,
    }
    if args.profile not in (None, "default"):
        opts["profile"] = args.profile
    return {**opts, **parse_overrides(args.set)}


def extra_args(text: str | None) -> dict[str, Any]:
    """`--vllm-args`: a JSON object of `AsyncEngineArgs` fields (ValueError if not)."""
    if not text:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--vllm-args: not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ValueError("--vllm-args must be a JSON object of vLLM engine arguments")
    return data


def engine_kwargs(args: argparse.Namespace, model: str, dtype: str | None) -> dict[str, Any]:
    """`AsyncEngineArgs(**kwargs)` for our serve flags (module doc)."""
    kw: dict[str, Any] = {
        "model": model,
        "dtype": _DTYPES.get(dtype or "", "auto"),
        "block_size": args.block_size,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "max_num_seqs": args.max_num_seqs,
        "enable_prefix_caching": args.enable_prefix_caching is not False,
        "seed": args.seed,
        "scheduler_cls": SCHEDULER,
        "disable_log_stats": False,  # /metrics reads vLLM's scheduler stats
    }
    optional = {
        "max_model_len": args.max_model_len,
        "num_gpu_blocks_override": args.num_device_blocks,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "kv_cache_memory_bytes": args.kv_cache_memory,
        "served_model_name": args.served_model_name,
    }
    kw.update({k: v for k, v in optional.items() if v is not None})
    extra = extra_args(getattr(args, "vllm_args", None))
    ours = plugin_options(args)
    theirs = dict(extra.pop("additional_config", {}) or {})
    theirs["augserve"] = {**ours, **(theirs.get("augserve") or {})}
    return {**kw, **extra, "additional_config": theirs}


def not_mapped(args: argparse.Namespace) -> list[str]:
    """Our flags that were set but mean nothing to vLLM (each logged once)."""
    defaults = {"session_ttl": 600.0, "pace_window": 0}
    out = []
    for name in _NOT_MAPPED:
        value = getattr(args, name, None)
        if value is not None and value != defaults.get(name):
            out.append("--" + name.replace("_", "-"))
    return out


def require_vllm() -> None:
    if importlib.util.find_spec("vllm") is None:
        raise ValueError(
            "--engine vllm needs vLLM installed in this environment "
            "(benchmarks/vs_vllm/setup_env.sh builds a CPU one); or use --engine augserve"
        )


def build_vllm_engine(args: argparse.Namespace, model: str, dtype: str | None) -> Any:
    """Start vLLM with our scheduler inside; the server's engine over it."""
    require_vllm()
    for flag in not_mapped(args):
        log.warning("%s is not honoured with --engine vllm (vLLM has no counterpart)", flag)
    from vllm.engine.arg_utils import AsyncEngineArgs  # type: ignore[import-not-found,unused-ignore]
    from vllm.v1.engine.async_llm import AsyncLLM  # type: ignore[import-not-found,unused-ignore]

    from augserve.integrations.vllm_engine import VllmAsyncEngine
    from augserve.integrations.vllm_stats import stat_logger

    stats = VllmStats(0)
    llm = AsyncLLM.from_engine_args(
        AsyncEngineArgs(**engine_kwargs(args, model, dtype)), stat_loggers=[stat_logger(stats)]
    )
    config = llm.vllm_config
    stats.num_blocks = int(config.cache_config.num_gpu_blocks or 0)
    face = VllmFace(model, int(config.model_config.max_model_len), _vocab(config))
    return VllmAsyncEngine(llm, face, stats)


def _vocab(config: Any) -> int:
    return int(config.model_config.get_vocab_size())
