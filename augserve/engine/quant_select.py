"""What `--dtype auto` (no dtype given) loads: quantized GGUF weights, else the fastest
exact dtype for the device found (docs/models.md).

- A GGUF model directory on the CPU keeps its weights quantized (`engine/quant.py`),
  activations in bf16 (torch's int4 / int8 CPU kernels are many times slower on fp32
  activations: `benchmarks/bench_quant_kernels.py`, docs/data/quant-kernels.json).
  Measured on SmolLM2's Q4_1 file (docs/engine-quant.md): decode steps 1.6-1.9x
  faster than the file dequantized to bf16 (`benchmarks/bench_quant_decode.py`), a
  fraction of its memory, and the same greedy agreement with the fp32 dequantization
  (the weights are the file's exactly; bf16 activations are the whole difference).
  Only on CPUs with bf16 instructions: elsewhere (avx2 only) bf16 is emulated and the
  quantized path was not measured, so GGUF files load dequantized there by default.
- Otherwise bf16 on CUDA and on CPUs with bf16 instructions (avx512_bf16, amx_bf16),
  fp32 on other CPUs, where bf16 matmuls are emulated and slower than fp32.

AUGSERVE_QUANT=0 turns the quantized path off for GGUF files loaded without a dtype; an
explicit dtype loads the GGUF file dequantized into that dtype (the reference the
quantized path is measured against).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from augserve.engine.ops import env_switch

BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This CPU's flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_has_bf16() -> bool:
    return any(flag in cpu_flags() for flag in BF16_FLAGS)


def default_dtype(device: torch.device) -> torch.dtype:
    """The model dtype when none is given (see the module doc)."""
    if device.type == "cuda" or cpu_has_bf16():
        return torch.bfloat16
    return torch.float32


def is_gguf_dir(model_dir: str | Path) -> bool:
    from augserve.engine.gguf_dir import GGUF_POINTER

    return (Path(model_dir) / GGUF_POINTER).is_file()


def quant_wanted(
    setting: bool | None, model_dir: str | Path, dtype: str | None, device: torch.device
) -> bool:
    """Whether to keep the weights quantized: only a GGUF directory on the CPU; then an
    explicit setting wins, then, when no dtype is given, AUGSERVE_QUANT if set, else
    yes on CPUs with bf16 instructions (the kernels want bf16 activations; measured
    only there, see the module doc)."""
    if device.type != "cpu" or not is_gguf_dir(model_dir):
        if setting:
            raise ValueError("quantize: only GGUF models on the CPU have a quantized form")
        return False
    if setting is not None:
        return setting
    env = env_switch("AUGSERVE_QUANT")
    return dtype is None and (env if env is not None else cpu_has_bf16())
