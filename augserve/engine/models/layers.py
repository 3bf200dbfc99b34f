"""Building blocks shared by the model families: norms, rotary tables, the decoder layer.

A decoder layer is two compilable regions around the paged attention:
`attn_in` (norm, fused QKV projection, rotary) and `attn_out` (output projection,
residual, norm, MLP). The regions hold all the weights; the attention in between
reads and writes the KV cache and stays outside the compiled graphs.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from augserve.engine.attention import AttentionMetadata, paged_attention
from augserve.engine.ops import mark_dynamic, rms_norm

CosSin = tuple[torch.Tensor, torch.Tensor]


class Embedding(nn.Embedding):
    """nn.Embedding without its random initialization: every weight is loaded (and
    `model_build` fills it with NaN first, so a missed one is caught). Drawing the normal
    init on the meta device goes through torch's Python references, whose first call
    imports torch._dynamo, sympy and triton: ~100 MB resident a server never uses."""

    def reset_parameters(self) -> None:
        pass


class RMSNorm(nn.Module):
    """Llama RMSNorm, computed in fp32 like Hugging Face's."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def rope_inv_freq(rot_dim: int, theta: float, scaling: dict[str, Any] | None) -> torch.Tensor:
    """Inverse frequencies, with 'default', 'linear' or 'llama3' scaling."""
    inv = 1.0 / (
        theta ** (torch.arange(0, rot_dim, 2, dtype=torch.int64, device="cpu").float() / rot_dim)
    )
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind == "default":
        return inv
    assert scaling is not None
    factor = float(scaling["factor"])
    if kind == "linear":
        return inv / factor
    if kind == "llama3":
        return _llama3_inv_freq(inv, factor, scaling)
    raise ValueError(f"rope_scaling type {kind!r} is not supported (default, linear, llama3)")


def _llama3_inv_freq(inv: torch.Tensor, factor: float, s: dict[str, Any]) -> torch.Tensor:
    low, high = float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old_len = float(s["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


class RotaryTable:
    """cos / sin of every position up to max_len, computed once at construction (as
    Hugging Face computes them: fp32 position * inverse frequency), gathered per step."""

    def __init__(self, rot_dim: int, inv_freq: torch.Tensor, max_len: int) -> None:
        self.rot_dim = rot_dim
        pos = torch.arange(max_len, dtype=torch.float32, device="cpu").unsqueeze(1)
        freqs = pos * inv_freq.to("cpu", torch.float32).unsqueeze(0)
        self._cos, self._sin = freqs.cos(), freqs.sin()

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> CosSin:
        """([T, rot_dim / 2], same) for the given positions."""
        if self._cos.device != positions.device:  # once, on the first step (CUDA)
            self._cos, self._sin = self._cos.to(positions.device), self._sin.to(positions.device)
        cos = self._cos.index_select(0, positions).to(dtype)
        return cos, self._sin.index_select(0, positions).to(dtype)


class DecoderLayer(nn.Module):
    """attn_in -> paged attention -> attn_out. attn_in(x, cos, sin) returns (q, k, v,
    *extra); attn_out(x, attn [T, H * D], *extra) returns the layer's output."""

    def __init__(self, attn_in: nn.Module, attn_out: nn.Module, head_dim: int) -> None:
        super().__init__()
        self.attn_in = attn_in
        self.attn_out = attn_out
        self.scale = head_dim**-0.5

    def forward(
        self,
        x: torch.Tensor,
        cos_sin: CosSin | None,
        meta: AttentionMetadata,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        cos, sin = cos_sin if cos_sin is not None else (None, None)
        mark_dynamic(x, cos, sin)
        q, k, v, *extra = self.attn_in(x, cos, sin)
        attn = paged_attention(q, k, v, k_cache, v_cache, meta, self.scale).flatten(1)
        mark_dynamic(attn, *extra)
        out: torch.Tensor = self.attn_out(x, attn, *extra)
        return out


def split_qkv(
    qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[T, (H + 2 kvH) D] -> q [T, H, D], k [T, kvH, D], v [T, kvH, D] (views). Viewed
    as heads first, then split: a view of a split would guard on T != 1 when compiled."""
    per_head = qkv.view(qkv.shape[0], heads + 2 * kv_heads, head_dim)
    q, k, v = per_head.split([heads, kv_heads, kv_heads], dim=1)  # type: ignore[no-untyped-call]
    return q, k, v


def load_param(param: torch.Tensor, value: torch.Tensor, name: str) -> None:
    """Copy `value` into `param`, checking the shape."""
    if tuple(param.shape) != tuple(value.shape):
        raise ValueError(
            f"weight {name}: expected shape {tuple(param.shape)}, got {tuple(value.shape)}"
        )
    with torch.no_grad():
        param.copy_(value.to(param.dtype))


def act_fn(name: str) -> Any:
    """Activation by Hugging Face name."""
    table = {
        "silu": F.silu,
        "swish": F.silu,
        "relu": F.relu,
        "gelu": F.gelu,
        "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
        "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    }
    if name not in table:
        raise ValueError(f"activation {name!r} is not supported ({sorted(table)})")
    return table[name]
