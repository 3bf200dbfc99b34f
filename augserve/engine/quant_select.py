"""What `--dtype auto` (no dtype given) loads: quantized GGUF weights, else the fastest
exact dtype for the device found (docs/models.md).

- A GGUF model directory on the CPU loads dequantized (bf16 where the CPU has bf16
  instructions) unless AUGSERVE_QUANT=1 keeps its weights quantized (`engine/quant.py`,
  activations in bf16; torch's int4 / int8 CPU kernels are many times slower on fp32
  activations). Opt-in because of the quiet side-by-side run of 2026-12-02
  (docs/engine-quant.md, docs/data/vs-llamacpp.json and vs-llamacpp-bf16.json): the
  quantized path decodes 1.65-1.8x faster at batch 1 than bf16 but prefills 512 tokens of
  a 0.5B model 3-4x slower (2.3-3.1 s vs 0.77 s: torch's int4 kernel costs grow with the
  rows, and the dense fallback rebuilds each weight per call) and gives 0.77x its
  8-concurrent throughput; on SmolLM2 it wins decode (43 vs 26 tok/s) and batch 8 (166 vs
  131) and loses prefill (0.57 vs 0.38 s). With fp32 activations its logits equal the fp32
  dequantization's; with bf16 activations its greedy agreement equals the bf16 load's.
  Measured only on a CPU with bf16 instructions.
- Otherwise bf16 on CUDA and on CPUs with bf16 instructions (avx512_bf16, amx_bf16),
  fp32 on other CPUs, where bf16 matmuls are emulated and slower than fp32.

AUGSERVE_QUANT=1 turns the quantized path on for GGUF files loaded without a dtype; an
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
    explicit setting wins, then, when no dtype is given, AUGSERVE_QUANT=1 (opt-in: the
    quiet comparison in the module doc does not support it as the default)."""
    if device.type != "cpu" or not is_gguf_dir(model_dir):
        if setting:
            raise ValueError("quantize: only GGUF models on the CPU have a quantized form")
        return False
    if setting is not None:
        return setting
    return dtype is None and env_switch("AUGSERVE_QUANT") is True  # opt-in: the module doc
