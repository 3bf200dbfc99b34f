"""The tool benchmark's fitted latency profile: fitted on the engine, priced by batch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "vs_vllm"))

import tools_profile  # noqa: E402

from augserve.core.latency import BatchShape  # noqa: E402
from augserve.engine.make_model import make_model  # noqa: E402
from augserve.profiles import load_profile  # noqa: E402


def test_fitted_profile_loads_and_carries_the_servers_memory(tmp_path: Path) -> None:
    model = make_model("llama", "tiny", tmp_path / "m", untied=True)
    args = argparse.Namespace(
        model=str(model), block_size=16, kv_tokens=1024, swap_tokens=512, threads=1,
        max_batch_tokens=256, swap_bandwidth=2e9, max_num_seqs=32,
    )  # fmt: skip
    path = tools_profile.fitted_profile(args, tmp_path / "profile.json")
    prof = load_profile(str(path))
    kvb = tools_profile.kv_bytes(str(model))
    assert (prof.kv_bytes, prof.device_kv_bytes, prof.host_kv_bytes) == (kvb, 1024 * kvb, 512 * kvb)
    assert prof.swap_bandwidth == 2e9 and prof.max_batch_tokens == 256
    assert prof.name == "augserve-cpu-fitted" and "held-out error" in prof.description
    one = prof.iteration_time(BatchShape(0, 0, 1, 65))
    many = prof.iteration_time(BatchShape(0, 0, 32, 32 * 65))
    assert 0 < one <= many  # fitted: a 32-request decode never prices below a single one
    assert prof.iteration_time(BatchShape(256, 256 * 257 // 2, 0, 0)) > one
