"""Tiny random-weight models made once per test session (no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from augserve.engine.make_model import make_model

# One thread: tiny models run fastest on one, and CI has two cores.
torch.set_num_threads(1)

VARIANTS: dict[str, tuple[str, dict[str, object]]] = {
    "llama_gqa": ("llama", {}),
    "llama_mha": ("llama", {"num_key_value_heads": 4, "rope_theta": 500000.0}),
    "llama3_scaling": (
        "llama",
        {
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            }
        },
    ),
    "qwen2_bias": ("qwen2", {}),
    "opt": ("opt", {}),
    "gptj": ("gptj", {}),
}


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {
        name: make_model(arch, "tiny", root / name, seed=i, overrides=ov)
        for i, (name, (arch, ov)) in enumerate(VARIANTS.items())
    }


@pytest.fixture
def torch_kernels(monkeypatch: pytest.MonkeyPatch) -> object:
    """torch's quantized kernels instead of the native ones (AUGSERVE_NATIVE=0) for one
    test; the cached choice is forgotten before and after it."""
    from augserve.engine.native import build

    monkeypatch.setenv("AUGSERVE_NATIVE", "0")
    build.load.cache_clear()
    build.available.cache_clear()
    yield None
    build.load.cache_clear()
    build.available.cache_clear()
