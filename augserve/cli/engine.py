"""`augserve make-model`, `augserve generate` and `augserve profile`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

DTYPES = ("fp32", "fp16", "bf16")
MODEL_HELP = "model directory (config.json + safetensors), FILE.gguf or smollm2"


def add_parser(subparsers: Any) -> None:
    mk = subparsers.add_parser(
        "make-model", help="write a random-weight model dir (tests, benchmarks)"
    )
    mk.add_argument("--arch", default="llama", choices=("llama", "qwen2", "mistral", "opt", "gptj"))
    mk.add_argument(
        "--preset", default="small", choices=("tiny", "small", "100m"), help="default: small"
    )
    mk.add_argument("--out", required=True, help="output directory")
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument(
        "--untied",
        action="store_true",
        help="an LM head of its own (a tied random model mostly repeats its last prompt token)",
    )
    mk.set_defaults(func=_make_model)

    gen = subparsers.add_parser("generate", help="generate text offline with the engine")
    gen.add_argument("--model", required=True, help=MODEL_HELP)
    gen.add_argument("--prompt", required=True, action="append", help="prompt text (repeatable)")
    gen.add_argument("--max-tokens", type=int, default=32)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=-1)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    gen.add_argument("--ignore-eos", action="store_true")
    gen.add_argument("--json", action="store_true", help="print one JSON object per prompt")
    _engine_args(gen)
    gen.set_defaults(func=_generate)

    prof = subparsers.add_parser("profile", help="fit a latency profile to the engine")
    prof.add_argument("--model", required=True, help=MODEL_HELP)
    prof.add_argument("--out", required=True, help="output profile JSON")
    prof.add_argument("--name", default=None, help="profile name (default: model dir name)")
    prof.add_argument("--repeats", type=int, default=3, help="timed runs per batch (median)")
    prof.add_argument("--holdout", type=float, default=0.25, help="share of batches held out")
    prof.add_argument("--quick", action="store_true", help="a smaller grid")
    prof.add_argument(
        "--stat", default="min", choices=("min", "median"), help="per-batch statistic"
    )
    _engine_args(prof)
    prof.set_defaults(func=_profile)


def _engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtype", default=None, choices=DTYPES, help="default: bf16")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--num-device-blocks", type=int, default=None)
    p.add_argument("--kv-cache-memory", type=int, default=None, help="device KV bytes")
    p.add_argument("--num-host-blocks", type=int, default=64)
    p.add_argument("--max-batch-tokens", type=int, default=512)
    p.add_argument("--policy", default="augserve")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument(
        "--compile", action=argparse.BooleanOptionalAction, default=None,
        help="torch.compile the model first (default: on CUDA for >= 20M parameters, "
        "off on CPU)",
    )  # fmt: skip


def _make_model(args: argparse.Namespace) -> int:
    from augserve.engine.make_model import make_model

    print(make_model(args.arch, args.preset, args.out, args.seed, untied=args.untied))
    return 0


def _generate(args: argparse.Namespace) -> int:
    from augserve.engine.llm import LLM, SamplingParams

    llm = LLM(
        args.model,
        policy=args.policy,
        dtype=args.dtype,
        device=args.device,
        num_threads=args.threads,
        compile=args.compile,
        block_size=args.block_size,
        num_device_blocks=args.num_device_blocks,
        kv_cache_memory=args.kv_cache_memory,
        num_host_blocks=args.num_host_blocks,
        max_batch_tokens=args.max_batch_tokens,
    )
    params = SamplingParams(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        max_tokens=args.max_tokens,
        stop=tuple(args.stop),
        ignore_eos=args.ignore_eos,
    )
    for out in llm.generate(args.prompt, params):
        if args.json:
            row = {
                "prompt": out.prompt,
                "text": out.text,
                "token_ids": out.token_ids,
                "finish_reason": out.finish_reason,
            }
            print(json.dumps(row))
        else:
            print(f"{out.prompt}{out.text}")
    return 0


def _profile(args: argparse.Namespace) -> int:
    from augserve.engine.kv_cache import KVCacheConfig
    from augserve.engine.model_runner import ModelRunner
    from augserve.engine.profiler import profile_runner
    from augserve.engine.resolve import resolve_model
    from augserve.engine.runner_config import RunnerConfig
    from augserve.engine.warmup import warm_up

    blocks = args.num_device_blocks
    if blocks is None and args.kv_cache_memory is None:
        blocks = 512
    kv = KVCacheConfig(args.block_size, blocks, args.kv_cache_memory, args.num_host_blocks)
    model = resolve_model(args.model)
    runner = ModelRunner(
        RunnerConfig(model, args.dtype, args.device, kv, args.threads, compile=args.compile)
    )
    warm_up(runner)  # compiled: before the timings, not inside them
    given = Path(args.model).resolve()
    name = args.name or (given.stem if given.is_file() else given.name)
    res = profile_runner(
        runner,
        name,
        args.max_batch_tokens,
        args.repeats,
        args.holdout,
        quick=args.quick,
        stat=args.stat,
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res.profile.to_dict(), indent=2) + "\n")
    p = res.profile
    print(f"wrote {out}")
    print(
        f"  c0={p.c0:.3e} c_prefill={p.c_prefill:.3e} c_attn={p.c_attn:.3e} "
        f"c_decode={p.c_decode:.3e} c_ctx={p.c_ctx:.3e}"
    )
    print(f"  kv_bytes/token={p.kv_bytes} swap_bandwidth={p.swap_bandwidth / 1e9:.2f} GB/s")
    print(
        f"  held-out error over {len(res.test)} batches: mean {res.mean_error:.1%}, "
        f"max {res.max_error:.1%}",
        file=sys.stdout,
    )
    return 0
