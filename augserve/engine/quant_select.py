"""What `--dtype auto` (no dtype given) loads: quantized GGUF weights, else the fastest
exact dtype for the device found (docs/models.md, docs/engine-quant.md).

- A GGUF model directory on the CPU keeps its weights quantized where augserve's native
  kernels build (`engine/native/`: integer products on int8 activations and a fused
  decode step; activations bf16 between the native calls). Measured side by side
  (docs/engine-quant.md, "Native kernels"): on SmolLM2 Q4_1 a batch-1 decode step 3.9 ms
  against 16.5 ms for the bf16 dequantized load and 8.9 ms on torch's int4 kernels; on a
  0.5B Q4_0 model 12.3 / 42.4 / 12.8 ms, prefill of 512 tokens within 10% of the bf16
  load (the dense product runs on the dequantized weight from 256 rows on).
  AUGSERVE_QUANT=0 loads it dequantized instead; AUGSERVE_QUANT=1 keeps it quantized on
  torch's int4 / int8 kernels where the native ones cannot build (opt-in there: those
  prefill a 0.5B model 2x slower than the bf16 load).
- Otherwise bf16 on CUDA and on CPUs with bf16 instructions (avx512_bf16, amx_bf16),
  fp32 on other CPUs, where bf16 matmuls are emulated and slower than fp32.

An explicit dtype loads the GGUF file dequantized into that dtype (the reference the
quantized path is measured against).
"""

from __future__ import annotations

from pathlib import Path

import torch

from augserve.engine.cpu_info import BF16_FLAGS, cpu_flags, cpu_has_bf16
from augserve.engine.ops import env_switch

__all__ = ["BF16_FLAGS", "cpu_flags", "cpu_has_bf16", "default_dtype", "quant_wanted"]


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
    explicit setting wins; then, when no dtype is given, AUGSERVE_QUANT (0 / 1), else
    whether the native kernels build here (the module doc)."""
    if device.type != "cpu" or not is_gguf_dir(model_dir):
        if setting:
            raise ValueError("quantize: only GGUF models on the CPU have a quantized form")
        return False
    if setting is not None:
        return setting
    if dtype is not None:
        return False
    env = env_switch("AUGSERVE_QUANT")
    if env is not None:
        return env
    from augserve.engine.native.build import available

    return available()
