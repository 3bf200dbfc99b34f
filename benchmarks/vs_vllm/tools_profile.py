"""augserve's latency profile for bench_tools.py: what its scheduler is priced with.

- flat: c0 = the engine's batch-1 decode iteration and c_prefill from a 256-token
  prefill, measured on a probe server; a decode step then costs the same at any
  batch size (what runs A-E used);
- fitted: `augserve profile --quick` in-process on the same model, dtype, block size,
  KV size and threads: iteration times over a grid of batch shapes, a non-negative
  fit of every coefficient, so a full batch costs what it costs.

Memory facts (KV bytes, device and host KV, swap bandwidth) are as the servers are
configured in both.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def kv_bytes(model: str) -> int:
    """KV bytes per token in fp32 (all layers, K and V)."""
    cfg = json.loads((Path(model) / "config.json").read_text())
    head = cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    return 2 * cfg["num_hidden_layers"] * kv_heads * head * 4


def swap_bandwidth(args: argparse.Namespace, blocks: int = 8) -> float:
    """Bytes/s of augserve's own swaps on this machine, measured in-process on the same
    model, dtype, block size and threads, for a request-sized move of `blocks` blocks
    (so the per-swap fixed cost is in the figure, as a request's swap pays it)."""
    import torch

    from augserve.engine.kv_cache import KVCacheConfig
    from augserve.engine.model_runner import ModelRunner
    from augserve.engine.profiler import measure_swap_bandwidth
    from augserve.engine.runner_config import RunnerConfig

    before = torch.get_num_threads()
    kv = KVCacheConfig(args.block_size, num_device_blocks=blocks, num_host_blocks=blocks)
    runner = ModelRunner(RunnerConfig(args.model, "fp32", "cpu", kv, args.threads))
    try:
        return measure_swap_bandwidth(runner, blocks, repeats=20)
    finally:
        torch.set_num_threads(before)


def write_profile(args: argparse.Namespace, iteration: float, prefill: float, path: Path) -> Path:
    """augserve's latency profile on this CPU: c0 = its decode iteration, c_prefill from
    a 256-token prefill; memory facts as the servers are configured."""
    kv = kv_bytes(args.model)
    profile = {
        "name": "augserve-cpu-measured", "c0": iteration,
        "c_prefill": max(0.0, prefill - iteration) / 256, "c_attn": 0.0, "c_decode": 0.0,
        "c_ctx": 0.0, "kv_bytes": kv, "device_kv_bytes": args.kv_tokens * kv,
        "host_kv_bytes": args.swap_tokens * kv, "swap_bandwidth": args.swap_bandwidth,
        "max_batch_tokens": args.max_batch_tokens, "max_num_seqs": args.max_num_seqs,
        "description": f"augserve CPU, measured: decode {iteration * 1e3:.1f} ms, "
                       f"256-token prefill {prefill * 1e3:.0f} ms, swaps "
                       f"{args.swap_bandwidth / 1e9:.2f} GB/s",
    }  # fmt: skip
    path.write_text(json.dumps(profile, indent=2))
    return path


def fitted_profile(args: argparse.Namespace, path: Path) -> Path:
    """Fit augserve's latency profile on its engine (quick grid) and write it."""
    import torch

    from augserve.engine.kv_cache import KVCacheConfig
    from augserve.engine.model_runner import ModelRunner
    from augserve.engine.profiler import profile_runner
    from augserve.engine.runner_config import RunnerConfig

    before = torch.get_num_threads()
    kv = KVCacheConfig(args.block_size, num_device_blocks=args.kv_tokens // args.block_size)
    runner = ModelRunner(RunnerConfig(args.model, "fp32", "cpu", kv, args.threads))
    try:
        res = profile_runner(
            runner, "augserve-cpu-fitted", args.max_batch_tokens, repeats=3, quick=True
        )
    finally:
        torch.set_num_threads(before)
    prof: dict[str, Any] = res.profile.to_dict()
    kvb = kv_bytes(args.model)
    prof.update(
        kv_bytes=kvb, device_kv_bytes=args.kv_tokens * kvb, host_kv_bytes=args.swap_tokens * kvb,
        swap_bandwidth=args.swap_bandwidth, max_num_seqs=args.max_num_seqs,
    )  # fmt: skip
    path.write_text(json.dumps(prof, indent=2))
    return path
