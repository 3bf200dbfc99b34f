"""Llama family: Llama 2/3, Vicuna, Mistral- and Qwen2-style configs (GQA, qkv bias, tying)."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from augserve.engine.loader import WeightSource
from augserve.engine.models.base import CausalLM, cfg_get, rope_settings
from augserve.engine.models.layers import (
    DecoderLayer,
    Embedding,
    RMSNorm,
    RotaryTable,
    act_fn,
    load_param,
    rope_inv_freq,
)
from augserve.engine.ops import neox_cos_sin, rms_norm, rope_neox, silu_and_mul
from augserve.engine.prepack import Linear
from augserve.engine.quant import QuantLinear, load_embedding, load_linear
from augserve.engine.quant_embed import QuantEmbedding


class LlamaAttnIn(nn.Module):
    """input norm -> fused QKV projection -> rotary (neox style, full head dim; q and k
    heads rotated together)."""

    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c["heads"], c["kv_heads"], c["head_dim"]
        self.input_layernorm = RMSNorm(c["hidden"], c["eps"])
        qkv_out = (c["heads"] + 2 * c["kv_heads"]) * c["head_dim"]
        self.qkv_proj = Linear(c["hidden"], qkv_out, bias=c["qkv_bias"])

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = rms_norm(x, self.input_layernorm.weight, self.input_layernorm.eps)
        nq, nkv = self.heads, self.kv_heads
        qkv: torch.Tensor = self.qkv_proj(h)
        per_head = qkv.view(x.shape[0], nq + 2 * nkv, self.head_dim)
        qk, v = per_head.split([nq + nkv, nkv], dim=1)  # type: ignore[no-untyped-call]
        q, k = rope_neox(qk, cos, sin).split([nq, nkv], dim=1)  # type: ignore[no-untyped-call]
        return q, k, v


class LlamaAttnOut(nn.Module):
    """output projection + residual -> post-attention norm -> gated MLP + residual."""

    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        h, inter = c["hidden"], c["intermediate"]
        self.o_proj = Linear(c["heads"] * c["head_dim"], h, bias=c["o_bias"])
        self.post_attention_layernorm = RMSNorm(h, c["eps"])
        self.gate_up_proj = Linear(h, 2 * inter, bias=c["mlp_bias"])
        self.down_proj = Linear(inter, h, bias=c["mlp_bias"])
        self.act_name = c["act"]
        self.act = act_fn(c["act"])

    def forward(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        x = x + self.o_proj(attn)
        norm = self.post_attention_layernorm
        gate_up = self.gate_up_proj(rms_norm(x, norm.weight, norm.eps))
        if self.act_name in ("silu", "swish"):
            act = silu_and_mul(gate_up)
        else:
            gate, up = gate_up.chunk(2, dim=-1)
            act = self.act(gate) * up
        down: torch.Tensor = self.down_proj(act)
        return x + down


def parse_llama_config(hf: dict[str, Any]) -> dict[str, Any]:
    arch = hf.get("architectures", ["LlamaForCausalLM"])[0]
    heads = cfg_get(hf, "num_attention_heads", int)
    hidden = cfg_get(hf, "hidden_size", int)
    qwen = arch == "Qwen2ForCausalLM"
    attn_bias = bool(hf.get("attention_bias", False))
    if qwen and hf.get("use_sliding_window", False):
        raise ValueError("config.json: field 'use_sliding_window' = true is not supported")
    max_len = cfg_get(hf, "max_position_embeddings", int, 4096)
    window = hf.get("sliding_window")
    if arch == "MistralForCausalLM" and isinstance(window, int) and window > 0:
        max_len = min(max_len, window)  # full attention is exact up to the window
    theta, scaling = rope_settings(hf)
    return {
        "hidden": hidden,
        "layers": cfg_get(hf, "num_hidden_layers", int),
        "heads": heads,
        "kv_heads": cfg_get(hf, "num_key_value_heads", int, heads),
        "head_dim": cfg_get(hf, "head_dim", int, hidden // heads),
        "intermediate": cfg_get(hf, "intermediate_size", int),
        "vocab": cfg_get(hf, "vocab_size", int),
        "eps": cfg_get(hf, "rms_norm_eps", float, 1e-6),
        "max_len": max_len,
        "qkv_bias": qwen or attn_bias,
        "o_bias": attn_bias and not qwen,
        "mlp_bias": bool(hf.get("mlp_bias", False)),
        "act": hf.get("hidden_act", "silu"),
        "tie": bool(hf.get("tie_word_embeddings", False)),
        "theta": theta,
        "scaling": scaling,
    }


class LlamaForCausalLM(CausalLM):
    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__()
        c = parse_llama_config(hf)
        if c["heads"] % c["kv_heads"]:
            raise ValueError(
                "config.json: num_attention_heads must be a multiple of num_key_value_heads"
            )
        self.c = c
        self.num_layers, self.num_kv_heads, self.head_dim = (
            c["layers"],
            c["kv_heads"],
            c["head_dim"],
        )
        self.vocab_size, self.max_model_len = c["vocab"], c["max_len"]
        self.rotary = RotaryTable(
            c["head_dim"], rope_inv_freq(c["head_dim"], c["theta"], c["scaling"]), c["max_len"]
        )
        self.embed_tokens = Embedding(c["vocab"], c["hidden"])
        self.layers = nn.ModuleList(
            DecoderLayer(LlamaAttnIn(c), LlamaAttnOut(c), c["head_dim"]) for _ in range(c["layers"])
        )
        self.norm = RMSNorm(c["hidden"], c["eps"])
        self.lm_head = None if c["tie"] else Linear(c["hidden"], c["vocab"], bias=False)

    def embed(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x: torch.Tensor = self.embed_tokens(input_ids)
        return x

    def rotation(self, positions: torch.Tensor, dtype: torch.dtype) -> Any:
        return neox_cos_sin(*self.rotary.cos_sin(positions, dtype))

    def decoder_layers(self) -> nn.ModuleList:
        return self.layers

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.norm(x)
        return out

    def tied_head(self) -> torch.Tensor | None:
        return self.embed_tokens.weight if self.lm_head is None else None

    def quantize(self, act_dtype: torch.dtype) -> None:
        """Swap every linear layer, the embedding and the (tied) LM head for their
        quantized forms (engine/quant.py), before the weights are loaded."""
        for mod in list(self.modules()):
            for name, child in list(mod.named_children()):
                if isinstance(child, Linear):
                    q = QuantLinear(
                        child.in_features, child.out_features, child.bias is not None, act_dtype
                    )
                    setattr(mod, name, q)
        c = self.c
        self.embed_tokens = QuantEmbedding(c["vocab"], c["hidden"], act_dtype)  # type: ignore[assignment]
        if self.lm_head is None:  # tied: a quantized copy of the embedding computes logits
            self.lm_head = QuantLinear(c["hidden"], c["vocab"], False, act_dtype)  # type: ignore[assignment]

    def load_weights(self, src: WeightSource) -> None:
        embed = "model.embed_tokens.weight"
        if not load_embedding(self.embed_tokens, src, embed):
            load_param(self.embed_tokens.weight, src.get(embed), "embed_tokens")
        load_param(self.norm.weight, src.get("model.norm.weight"), "model.norm.weight")
        if self.lm_head is not None:
            head = "lm_head.weight" if src.has("lm_head.weight") else embed
            if load_linear(self.lm_head, src, [head], "lm_head"):
                if head == embed and isinstance(self.embed_tokens, QuantEmbedding):
                    self.embed_tokens.share(getattr(self.lm_head, "native", None))  # held once
            else:
                w = src.get("lm_head.weight") if src.has("lm_head.weight") else None
                load_param(
                    self.lm_head.weight, w if w is not None else self.embed_tokens.weight, "lm_head"
                )
        for i, layer in enumerate(self.layers):
            self._load_layer(cast(DecoderLayer, layer), src, f"model.layers.{i}.")

    def _load_matrix(
        self, module: nn.Module, src: WeightSource, names: list[str], label: str
    ) -> None:
        """The weight of a (fused) projection: the tensors `names` stacked along rows."""
        if not load_linear(module, src, names, label):
            weight = cast(torch.Tensor, module.weight)
            load_param(weight, torch.cat([src.get(n) for n in names]), label)

    def _load_layer(self, layer: DecoderLayer, src: WeightSource, p: str) -> None:
        a = p + "self_attn."
        attn = cast(LlamaAttnIn, layer.attn_in)
        out = cast(LlamaAttnOut, layer.attn_out)
        qkv = [f"{a}{n}_proj.weight" for n in "qkv"]
        self._load_matrix(attn.qkv_proj, src, qkv, a + "qkv_proj.weight")
        if attn.qkv_proj.bias is not None:
            b = [src.get(f"{a}{n}_proj.bias") for n in "qkv"]
            load_param(attn.qkv_proj.bias, torch.cat(b), a + "qkv_proj.bias")
        self._load_matrix(out.o_proj, src, [a + "o_proj.weight"], a + "o_proj.weight")
        if out.o_proj.bias is not None:
            load_param(out.o_proj.bias, src.get(a + "o_proj.bias"), a + "o_proj.bias")
        m = p + "mlp."
        gu = [m + "gate_proj.weight", m + "up_proj.weight"]
        self._load_matrix(out.gate_up_proj, src, gu, m + "gate_up_proj.weight")
        self._load_matrix(out.down_proj, src, [m + "down_proj.weight"], m + "down_proj.weight")
        if out.gate_up_proj.bias is not None and out.down_proj.bias is not None:
            gub = torch.cat([src.get(m + "gate_proj.bias"), src.get(m + "up_proj.bias")])
            load_param(out.gate_up_proj.bias, gub, m + "gate_up_proj.bias")
            load_param(out.down_proj.bias, src.get(m + "down_proj.bias"), m + "down_proj.bias")
        load_param(attn.input_layernorm.weight, src.get(p + "input_layernorm.weight"), p + "ln1")
        load_param(
            out.post_attention_layernorm.weight,
            src.get(p + "post_attention_layernorm.weight"),
            p + "ln2",
        )
