"""Linear layers on weights prepacked once for oneDNN (CPU, fp32).

Decode multiplies a few rows (the batch) by every weight matrix, and torch's
`F.linear` (MKL's sgemm here) is slow at such skinny products: it reads the weights
at 3-8 GB/s. vLLM's CPU backend reorders each weight once, at load, into oneDNN's
blocked layout and runs every projection through oneDNN; that is 1.5-3x faster at
16-64 rows and the same at prefill sizes (`benchmarks/bench_gemm_prepack.py`,
docs/engine-speed.md). This module does the same with torch's own oneDNN ops.

The packed tensor is opaque to `torch.compile`, so it never enters a graph: the
custom op `augserve::packed_linear(x, weight, bias)` takes the ordinary weight,
and its kernel looks the packed copy up by the weight's address. A weight that was
not packed, or was changed in place since (its version moved), falls back to
`F.linear`, so a stale copy is never used. The packed copy is dropped when its
weight is freed, so a later tensor at the same address cannot pick it up.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from augserve.engine.ops import env_switch

PREPACK_MIN_PARAMS = 1_000_000  # below: the tests' toy models (see prepack_wanted)
ROWS_HINT = 32  # oneDNN picks the blocked layout for this many rows; any count works


@dataclass(frozen=True)
class _Packed:
    weight: torch.Tensor  # oneDNN's blocked layout (opaque)
    shape: tuple[int, ...]
    version: int


_PACKED: dict[int, _Packed] = {}


def prepack_available() -> bool:
    return bool(torch.backends.mkldnn.is_available()) and hasattr(  # type: ignore[no-untyped-call]
        torch.ops.mkldnn, "_reorder_linear_weight"
    )


def prepack_wanted(
    setting: bool | None, num_params: int, device: torch.device, dtype: torch.dtype
) -> bool:
    """Whether to prepack: only for fp32 on the CPU with oneDNN. Then an explicit
    setting wins, then AUGSERVE_PREPACK=0/1, then 'auto': on for models of at least
    `PREPACK_MIN_PARAMS` parameters. oneDNN's packed products beat MKL's `F.linear` in
    every step of the 5M-parameter sessions model too (prefill 1.5-1.6x, decode
    1.0-1.25x on an AMD EPYC, where MKL takes its generic path:
    `benchmarks/bench_fp32_steps.py`, docs/data/fp32-steps.json); the floor only keeps
    the tests' toy models on `F.linear`, so that the suite runs both paths."""
    if device.type != "cpu" or dtype != torch.float32 or not prepack_available():
        return False
    if setting is not None:
        return setting
    env = env_switch("AUGSERVE_PREPACK")
    return num_params >= PREPACK_MIN_PARAMS if env is None else env


def pack_weight(weight: torch.Tensor) -> None:
    """Prepack `weight` [out, in] (fp32, CPU) for `packed_linear`. Its packed copy is a
    second copy of the matrix, freed with the weight."""
    if weight.dtype != torch.float32 or weight.device.type != "cpu" or weight.dim() != 2:
        raise ValueError(
            f"prepack: need a 2-D fp32 CPU weight, got {tuple(weight.shape)} "
            f"{weight.dtype} on {weight.device}"
        )
    key = weight.data_ptr()
    with torch.no_grad():
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT)
    if key not in _PACKED:
        weakref.finalize(weight, _PACKED.pop, key, None)
    _PACKED[key] = _Packed(packed, tuple(weight.shape), weight._version)


def is_packed(weight: torch.Tensor) -> bool:
    """Whether `packed_linear` will use a packed copy for `weight`."""
    p = _PACKED.get(weight.data_ptr())
    return p is not None and p.shape == tuple(weight.shape) and p.version == weight._version


@torch.library.custom_op("augserve::packed_linear", mutates_args=())
def packed_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias) through weight's prepacked copy (F.linear without one)."""
    if not is_packed(weight) or x.dtype != torch.float32:
        return F.linear(x, weight, bias)
    packed = _PACKED[weight.data_ptr()].weight
    out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(
        x.contiguous(), packed, bias, "none", [], ""
    )
    return out


@packed_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, prepacked: bool
) -> torch.Tensor:
    return packed_linear(x, weight, bias) if prepacked else F.linear(x, weight, bias)


class Linear(nn.Linear):
    """nn.Linear that runs through its prepacked weight once `prepack_linears` packed it."""

    prepacked: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.prepacked)


def prepack_linears(model: nn.Module) -> int:
    """Pack the weight of every `Linear` in `model` (after its weights are loaded);
    returns how many were packed. Models pack their tied LM head themselves."""
    n = 0
    for m in model.modules():
        if isinstance(m, Linear):
            pack_weight(m.weight)
            m.prepacked = True
            n += 1
    return n
