"""OPT (learned positions offset by 2, LayerNorm, ReLU MLP, tied LM head)."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from augserve.engine.loader import WeightSource
from augserve.engine.models.base import CausalLM, cfg_get
from augserve.engine.models.layers import DecoderLayer, Embedding, act_fn, load_param, split_qkv
from augserve.engine.prepack import Linear

POS_OFFSET = 2


class OPTAttnIn(nn.Module):
    """(pre-LN: self_attn_layer_norm) -> fused QKV projection; OPT has no rotary."""

    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        h, b = c["hidden"], c["bias"]
        self.heads, self.head_dim = c["heads"], h // c["heads"]
        self.pre_ln = c["pre_ln"]
        self.self_attn_layer_norm = nn.LayerNorm(h)
        self.qkv_proj = Linear(h, 3 * h, bias=b)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.self_attn_layer_norm(x) if self.pre_ln else x
        return split_qkv(self.qkv_proj(h), self.heads, self.heads, self.head_dim)


class OPTAttnOut(nn.Module):
    """out_proj + residual, then the MLP (ReLU by default), LayerNorms pre or post."""

    def __init__(self, c: dict[str, Any], attn_in: OPTAttnIn) -> None:
        super().__init__()
        h, b = c["hidden"], c["bias"]
        self.pre_ln = c["pre_ln"]
        self.out_proj = Linear(h, h, bias=b)
        self.final_layer_norm = nn.LayerNorm(h)
        self.fc1 = Linear(h, c["ffn"], bias=b)
        self.fc2 = Linear(c["ffn"], h, bias=b)
        self.act = act_fn(c["act"])
        # post-LN models normalise after the residual with attn_in's LayerNorm
        self._attn_ln = [attn_in.self_attn_layer_norm]  # a list: not a second registration

    def forward(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        x = x + self.out_proj(attn)
        if not self.pre_ln:
            x = self._attn_ln[0](x)
        h = self.final_layer_norm(x) if self.pre_ln else x
        x = x + self.fc2(self.act(self.fc1(h)))
        return x if self.pre_ln else self.final_layer_norm(x)


def _opt_layer(c: dict[str, Any]) -> DecoderLayer:
    attn_in = OPTAttnIn(c)
    return DecoderLayer(attn_in, OPTAttnOut(c, attn_in), c["hidden"] // c["heads"])


def parse_opt_config(hf: dict[str, Any]) -> dict[str, Any]:
    hidden = cfg_get(hf, "hidden_size", int)
    proj = hf.get("word_embed_proj_dim", hidden)
    if proj != hidden:
        raise ValueError(
            f"config.json: field 'word_embed_proj_dim' ({proj}) != hidden_size is not supported"
        )
    heads = cfg_get(hf, "num_attention_heads", int)
    if hidden % heads:
        raise ValueError("config.json: hidden_size must be a multiple of num_attention_heads")
    if not hf.get("layer_norm_elementwise_affine", True):
        raise ValueError(
            "config.json: field 'layer_norm_elementwise_affine' = false is not supported"
        )
    return {
        "hidden": hidden,
        "heads": heads,
        "layers": cfg_get(hf, "num_hidden_layers", int),
        "ffn": cfg_get(hf, "ffn_dim", int),
        "vocab": cfg_get(hf, "vocab_size", int),
        "max_len": cfg_get(hf, "max_position_embeddings", int, 2048),
        "bias": bool(hf.get("enable_bias", True)),
        "pre_ln": bool(hf.get("do_layer_norm_before", True)),
        "final_ln": bool(hf.get("do_layer_norm_before", True))
        and not hf.get("_remove_final_layer_norm", False),
        "act": hf.get("activation_function", "relu"),
        "tie": bool(hf.get("tie_word_embeddings", True)),
    }


class OPTForCausalLM(CausalLM):
    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__()
        c = parse_opt_config(hf)
        self.num_layers, self.num_kv_heads = c["layers"], c["heads"]
        self.head_dim, self.vocab_size, self.max_model_len = (
            c["hidden"] // c["heads"],
            c["vocab"],
            c["max_len"],
        )
        self.embed_tokens = Embedding(c["vocab"], c["hidden"])
        self.embed_positions = Embedding(c["max_len"] + POS_OFFSET, c["hidden"])
        self.layers = nn.ModuleList(_opt_layer(c) for _ in range(c["layers"]))
        self.final_layer_norm = nn.LayerNorm(c["hidden"]) if c["final_ln"] else None
        self.lm_head = None if c["tie"] else Linear(c["hidden"], c["vocab"], bias=False)

    def embed(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x: torch.Tensor = self.embed_tokens(input_ids) + self.embed_positions(
            positions + POS_OFFSET
        )
        return x

    def decoder_layers(self) -> nn.ModuleList:
        return self.layers

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        if self.final_layer_norm is None:
            return x
        out: torch.Tensor = self.final_layer_norm(x)
        return out

    def tied_head(self) -> torch.Tensor | None:
        return self.embed_tokens.weight if self.lm_head is None else None

    def load_weights(self, src: WeightSource) -> None:
        prefixes = ("model.decoder.", "decoder.")

        def get(name: str) -> torch.Tensor:
            return src.first(*(p + name for p in prefixes))

        load_param(self.embed_tokens.weight, get("embed_tokens.weight"), "embed_tokens")
        load_param(self.embed_positions.weight, get("embed_positions.weight"), "embed_positions")
        if self.lm_head is not None:
            load_param(self.lm_head.weight, src.get("lm_head.weight"), "lm_head.weight")
        if self.final_layer_norm is not None:
            load_param(
                self.final_layer_norm.weight, get("final_layer_norm.weight"), "final_layer_norm"
            )
            load_param(self.final_layer_norm.bias, get("final_layer_norm.bias"), "final_layer_norm")
        for i, layer in enumerate(self.layers):
            self._load_layer(cast(DecoderLayer, layer), get, f"layers.{i}.")

    @staticmethod
    def _load_layer(layer: DecoderLayer, get: Any, p: str) -> None:
        a = p + "self_attn."
        attn = cast(OPTAttnIn, layer.attn_in)
        out = cast(OPTAttnOut, layer.attn_out)
        qkv = torch.cat([get(f"{a}{n}_proj.weight") for n in "qkv"])
        load_param(attn.qkv_proj.weight, qkv, a + "qkv_proj.weight")
        load_param(out.out_proj.weight, get(a + "out_proj.weight"), a + "out_proj.weight")
        if attn.qkv_proj.bias is not None and out.out_proj.bias is not None:
            load_param(
                attn.qkv_proj.bias, torch.cat([get(f"{a}{n}_proj.bias") for n in "qkv"]), a + "bias"
            )
            load_param(out.out_proj.bias, get(a + "out_proj.bias"), a + "out_proj.bias")
        owners = {"self_attn_layer_norm": attn, "final_layer_norm": out, "fc1": out, "fc2": out}
        for mod_name, owner in owners.items():
            mod = getattr(owner, mod_name)
            load_param(mod.weight, get(f"{p}{mod_name}.weight"), p + mod_name)
            if mod.bias is not None:
                load_param(mod.bias, get(f"{p}{mod_name}.bias"), p + mod_name)
