"""A placeholder latency model for an engine without a fitted profile."""

from __future__ import annotations

from augserve.core.config import SchedulerConfig
from augserve.core.latency import LatencyProfile
from augserve.engine.model_runner import ModelRunner


def default_latency(runner: ModelRunner, cfg: SchedulerConfig) -> LatencyProfile:
    """A placeholder latency model from the runner's memory facts (fit a real one with
    `augserve profile`): CPU-ish iteration times, a PCIe-like host link."""
    kv = runner.kv_bytes_per_token
    return LatencyProfile(
        name="engine-default",
        c0=5e-3,
        c_prefill=5e-5,
        c_attn=1e-8,
        c_decode=2e-4,
        c_ctx=1e-7,
        kv_bytes=kv,
        device_kv_bytes=runner.num_device_blocks * runner.block_size * kv,
        host_kv_bytes=runner.num_host_blocks * runner.block_size * kv,
        swap_bandwidth=8e9,
        max_batch_tokens=cfg.max_batch_tokens,
        max_num_seqs=cfg.max_num_seqs,
    )
