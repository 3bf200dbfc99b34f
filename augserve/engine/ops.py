"""Elementwise kernels of the model families, written once in plain torch.

Eagerly they are the reference; under `torch.compile` (see `compile_regions`)
inductor fuses each region (norm + projection + rotary before attention, the
residual + norm + MLP after it) into a few loops around the matmuls, which is
what vLLM's hand-fused rms_norm / silu_and_mul / rotary kernels buy it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import torch
import torch.fx.experimental._config as fx_config
import torch.nn.functional as F
from torch import nn

_MARKS = [False]  # mark_dynamic does something: set once a graph is compiled in-process


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama RMSNorm computed in fp32 like Hugging Face's: weight * normalize(x), the
    normalization in fp32 (torch's fused kernel: one op for HF's five), rounded to x's
    dtype before the weight multiplies it."""
    normed = F.rms_norm(x.float(), (x.shape[-1],), None, eps)
    return weight * normed.to(x.dtype)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[..., 2 * I] -> silu(gate) * up, [..., I]."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def rotate(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rot_dim: int, interleaved: bool
) -> torch.Tensor:
    """Rotary embedding on the first `rot_dim` dims of each head. x [T, H, D]; cos/sin
    [T, rot_dim / 2]. Interleaved (GPT-J) pairs dims (0, 1), (2, 3)...; otherwise
    (neox / Llama) pairs dim i with i + rot_dim / 2."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    xr = x[..., :rot_dim]
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        rot = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    else:
        x1, x2 = xr[..., : rot_dim // 2], xr[..., rot_dim // 2 :]
        rot = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    if rot_dim == x.shape[-1]:
        return rot
    return torch.cat((rot, x[..., rot_dim:]), dim=-1)


def neox_cos_sin(cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[T, D / 2] cos / sin -> [T, 1, D] tables for `rope_neox`: cos twice, then -sin
    and sin (the sign of rotate_half folded in). Once per step, for every layer."""
    return torch.cat((cos, cos), -1).unsqueeze(1), torch.cat((-sin, sin), -1).unsqueeze(1)


def rope_neox(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Neox / Llama rotary over the full head dim, as Hugging Face computes it (x * cos +
    rotate_half(x) * sin, bit for bit in x's dtype) in three ops. x [T, n, D] (q and k
    heads together); cos / sin from `neox_cos_sin`."""
    t, n, d = x.shape
    swapped = x.view(t, n, 2, d // 2).flip(2).view(t, n, d)  # halves swapped
    return x * cos + swapped * sin


def compile_wanted(setting: bool | None, num_params: int, device: torch.device) -> bool:
    """Whether to compile: an explicit setting wins, then AUGSERVE_COMPILE=0/1, then
    'auto': on CUDA for models of at least 20M parameters (below that the one-off
    compile time outweighs the gain; the tests' tiny models stay eager); off on CPU,
    where a cold compile of SmolLM2 took minutes on a busy 2-core machine for steps
    not faster enough to pay for it (docs/engine-speed.md, "Compilation")."""
    if setting is not None:
        return setting
    env = env_switch("AUGSERVE_COMPILE")
    if env is not None:
        return env
    return num_params >= 20_000_000 and device.type == "cuda"


def env_switch(name: str) -> bool | None:
    """An on/off environment switch: True for 1/true/yes/on, False for 0/false/no/off,
    None when unset or 'auto'; ValueError naming the variable otherwise."""
    env = os.environ.get(name, "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    if env in ("1", "true", "yes", "on"):
        return True
    if env not in ("", "auto"):
        raise ValueError(f"{name} must be 0, 1 or auto, got {env!r}")
    return None


def cuda_graphs_wanted(setting: bool | None, device: torch.device) -> bool:
    """Whether decode steps replay CUDA graphs: `setting` if given, else
    AUGSERVE_CUDA_GRAPHS (0 / 1) if set, else on for CUDA. Never off CUDA."""
    if device.type != "cuda":
        return False
    if setting is not None:
        return setting
    env = os.environ.get("AUGSERVE_CUDA_GRAPHS", "").strip().lower()
    if env not in ("", "0", "1"):
        raise ValueError(f"AUGSERVE_CUDA_GRAPHS must be 0 or 1, got {env!r}")
    return env != "0"


def dynamic_shape_settings() -> None:
    """One compiled graph per region for every batch size: sizes of 1 are not special
    (`backed_size_oblivious`), and two sizes that happen to be equal when a graph is
    traced are not assumed equal forever (no duck sizing). Process-wide settings of
    torch's symbolic shapes, made when a runner compiles."""
    fx_config.backed_size_oblivious = True
    fx_config.use_duck_shape = False
    _MARKS[0] = True


def mark_dynamic(*tensors: torch.Tensor | None, dims: tuple[int, ...] = (0,)) -> None:
    """Declare the batch-dependent dims of a compiled graph's inputs dynamic before a
    call; every other dim (hidden size, heads, head dim, block size) stays static, so
    inductor's loops over them are fixed-size (twice as fast as all-dynamic kernels).
    Nothing (not even dynamo's bookkeeping) until something compiles in this process."""
    if not _MARKS[0] or torch.compiler.is_compiling():
        return
    for t in tensors:
        if t is not None:
            for d in dims:
                torch._dynamo.maybe_mark_dynamic(t, d)


def compile_regions(regions: Iterable[nn.Module]) -> None:
    """Compile each region module in place. Regions of one class share one compiled
    graph (parameters are graph inputs), so 12 layers compile once, not 12 times; the
    token dimension is marked dynamic (`mark_dynamic`), so a new batch size does not
    recompile."""
    dynamic_shape_settings()
    for m in regions:
        m.compile()
