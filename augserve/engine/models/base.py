"""The interface every model family implements, and config-reading helpers."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import nn

from augserve.engine.attention import AttentionMetadata
from augserve.engine.loader import WeightSource
from augserve.engine.models.layers import DecoderLayer
from augserve.engine.prepack import linear, pack_weight, prepack_linears

_MISSING = object()


def cfg_get(hf: dict[str, Any], key: str, kind: type, default: Any = _MISSING) -> Any:
    """hf[key] checked against `kind`; ValueError naming the field when wrong/missing."""
    val = hf.get(key)
    if val is None:  # absent or null: fall back to the default
        if default is None:
            return None
        val = default
    if val is _MISSING:
        raise ValueError(f"config.json: missing field {key!r}")
    if kind is float and isinstance(val, int) and not isinstance(val, bool):
        val = float(val)
    if not isinstance(val, kind) or (kind is int and isinstance(val, bool)):
        raise ValueError(f"config.json: field {key!r} must be {kind.__name__}, got {val!r}")
    if (
        kind in (int, float)
        and isinstance(val, (int, float))
        and val <= 0
        and key not in ("bos_token_id", "eos_token_id")
    ):
        raise ValueError(f"config.json: field {key!r} must be > 0, got {val!r}")
    return val


def rope_settings(hf: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, rope_scaling) from either transformers 4 or 5 style configs."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict):
        theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
        kind = params.get("rope_type", params.get("type", "default"))
        return theta, None if kind == "default" else params
    theta = float(hf.get("rope_theta", 10000.0))
    scaling = hf.get("rope_scaling")
    if scaling is not None and not isinstance(scaling, dict):
        raise ValueError(f"config.json: field 'rope_scaling' must be an object, got {scaling!r}")
    return theta, scaling


class CausalLM(nn.Module, ABC):
    """Base class: decoder-only LM computing over the flat tokens of one step."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_model_len: int
    logits_prepacked: bool = False  # the tied LM head runs through its packed copy

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        k_caches: list[torch.Tensor],
        v_caches: list[torch.Tensor],
    ) -> torch.Tensor:
        """Hidden states [T, hidden] of the flat tokens: the embedding, every decoder
        layer over its own caches, the final norm. Families differ only in the hooks."""
        x = self.embed(input_ids, positions)
        rotation = self.rotation(positions, x.dtype)
        for i, layer in enumerate(self.decoder_layers()):
            x = layer(x, rotation, meta, k_caches[i], v_caches[i])
        return self.final_norm(x)

    @abstractmethod
    def embed(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The input embeddings [T, hidden] (learned positions included, if any)."""

    @abstractmethod
    def decoder_layers(self) -> nn.ModuleList:
        """The DecoderLayers, in order (each family keeps its Hugging Face name)."""

    def rotation(self, positions: torch.Tensor, dtype: torch.dtype) -> Any:
        """What each layer's attention rotates q and k by; None without rotary."""
        return None

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        """The norm after the last layer (identity where the family has none)."""
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [N, vocab] of the given hidden states: the family's `lm_head`, or the
        tied input embedding where it has none."""
        head: nn.Module | None = getattr(self, "lm_head", None)
        if head is not None:
            logits: torch.Tensor = head(hidden)
            return logits
        tied = self.tied_head()
        assert tied is not None  # a model without lm_head ties it to the embedding
        return linear(hidden, tied, None, self.logits_prepacked)

    @abstractmethod
    def load_weights(self, src: WeightSource) -> None:
        """Copy every parameter from `src` (Hugging Face names)."""

    def quantize(self, act_dtype: torch.dtype) -> None:
        """Swap in weight-only quantized layers before loading (engine/quant.py); only
        the families GGUF files hold (Llama, Qwen2) have them."""
        raise ValueError(f"{type(self).__name__}: no quantized form (GGUF is Llama-family only)")

    def regions(self) -> list[nn.Module]:
        """The modules to compile: each decoder layer's attn_in and attn_out."""
        layers = [m for m in self.modules() if isinstance(m, DecoderLayer)]
        return [r for layer in layers for r in (layer.attn_in, layer.attn_out)]

    def tied_head(self) -> torch.Tensor | None:
        """The input embedding when it doubles as the LM head, else None."""
        return None

    def prepack(self) -> int:
        """Prepack every linear layer's weight for oneDNN (CPU, fp32; see
        engine/prepack.py), the tied LM head included; returns how many."""
        n = prepack_linears(self)
        tied = self.tied_head()
        if tied is not None:
            pack_weight(tied)
            self.logits_prepacked = True
            n += 1
        return n
