"""RunnerConfig: how to build a ModelRunner (model dir, dtype, device, KV cache, options).

The options' defaults are chosen where they are used (`quant_select`, `ops`, `prepack`);
see docs/design.md for the engine's layers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from augserve.engine.kv_cache import KVCacheConfig

DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
}


@dataclass(frozen=True)
class RunnerConfig:
    """How to build a ModelRunner. dtype: 'bf16' | 'fp16' | 'fp32' | None (auto: bf16 on
    a CPU with bf16 instructions or CUDA, else fp32; `quant_select.default_dtype`).

    quantize: keep a GGUF file's weights quantized (engine/quant.py); None = auto:
    on with AUGSERVE_QUANT=1 for GGUF on the CPU when no dtype is given, else off
    (`quant_select.quant_wanted`). An explicit dtype loads the dequantized weights.

    compile: torch.compile the layers' fused regions and the paged decode kernel;
    None = AUGSERVE_COMPILE if set, else on CUDA for models of >= 20M parameters, off
    on CPU (`ops.compile_wanted`). The first steps then pay a one-off compile (minutes
    on a busy CPU; cached on disk by inductor for later processes): `warmup.warm_up`
    pays it before serving (`builder.build_runner` calls it)."""

    model_dir: str
    dtype: str | None = None
    device: str | None = None  # default: cuda if available, else cpu
    kv: KVCacheConfig = field(default_factory=lambda: KVCacheConfig(num_device_blocks=256))
    num_threads: int | None = None
    compile: bool | None = None
    prepack: bool | None = None  # oneDNN-packed linear weights; see prepack.prepack_wanted
    quantize: bool | None = None  # GGUF weights kept quantized; see quant_select.quant_wanted
    cuda_graphs: bool | None = (
        None  # decode steps as CUDA graphs; None: AUGSERVE_CUDA_GRAPHS, else on for CUDA
    )

    def __post_init__(self) -> None:
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {self.num_threads}")
        if self.device is not None:
            check_device(self.device)


def check_device(name: str) -> torch.device:
    """A usable torch device from 'cpu', 'cuda' or 'cuda:N'; ValueError naming the problem."""
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {name!r}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {name!r}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {name!r}: CUDA is not available on this machine "
                f"(torch {torch.__version__}, torch.cuda.is_available() is False); use --device cpu"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {name!r}: only {torch.cuda.device_count()} CUDA device(s) visible"
            )
    return dev
