"""Building blocks shared by the model families: norms, rotary embeddings, attention."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from augserve.engine.attention import AttentionMetadata, paged_attention


class RMSNorm(nn.Module):
    """Llama RMSNorm, computed in fp32 like Hugging Face's."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.rms_norm(x.float(), (x.shape[-1],), None, self.eps)
        return self.weight * normed.to(x.dtype)


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


class Rotary(nn.Module):
    """Rotary position embedding on the first `rot_dim` dims of each head."""

    def __init__(self, rot_dim: int, inv_freq: torch.Tensor, interleaved: bool) -> None:
        super().__init__()
        self.rot_dim = rot_dim
        self.interleaved = interleaved
        self.inv_freq = inv_freq

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.float().unsqueeze(1) * self.inv_freq.unsqueeze(0)
        return freqs.cos().to(dtype).unsqueeze(1), freqs.sin().to(dtype).unsqueeze(1)

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [T, H, D]; cos/sin [T, 1, rot_dim/2]."""
        r = self.rot_dim
        xr = x[..., :r]
        if self.interleaved:
            x1, x2 = xr[..., 0::2], xr[..., 1::2]
            rot = torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
        else:
            x1, x2 = xr[..., : r // 2], xr[..., r // 2 :]
            rot = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        if r == x.shape[-1]:
            return rot
        return torch.cat((rot, x[..., r:]), dim=-1)


class SelfAttention(nn.Module):
    """Fused-QKV attention with optional rotary, over the paged KV cache."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        qkv_bias: bool,
        o_bias: bool,
        rotary: Rotary | None,
    ) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.qkv_proj = nn.Linear(hidden, (heads + 2 * kv_heads) * head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=o_bias)
        self.rotary = rotary
        self.scale = head_dim**-0.5

    def forward(
        self,
        x: torch.Tensor,
        cos_sin: tuple[torch.Tensor, torch.Tensor] | None,
        meta: AttentionMetadata,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        t = x.shape[0]
        qkv = self.qkv_proj(x)
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(t, self.heads, self.head_dim)
        k = k.view(t, self.kv_heads, self.head_dim)
        v = v.view(t, self.kv_heads, self.head_dim)
        if self.rotary is not None and cos_sin is not None:
            q = self.rotary.rotate(q, *cos_sin)
            k = self.rotary.rotate(k, *cos_sin)
        out = paged_attention(q, k, v, k_cache, v_cache, meta, self.scale)
        return self.o_proj(out.reshape(t, q_size))


def cat_weights(*ts: torch.Tensor) -> torch.Tensor:
    return torch.cat(ts, dim=0)


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
