"""GPT-J (interleaved partial rotary, parallel attention + MLP, biased LM head)."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import nn

from augserve.engine.loader import WeightSource
from augserve.engine.models.base import CausalLM, cfg_get
from augserve.engine.models.layers import (
    DecoderLayer,
    Embedding,
    RotaryTable,
    act_fn,
    load_param,
    rope_inv_freq,
    split_qkv,
)
from augserve.engine.ops import rotate
from augserve.engine.prepack import Linear


class GPTJAttnIn(nn.Module):
    """ln_1 -> QKV (interleaved partial rotary) and, in parallel, the MLP of the same input."""

    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        h = c["hidden"]
        self.heads, self.head_dim, self.rot = c["heads"], c["head_dim"], c["rot"]
        self.ln_1 = nn.LayerNorm(h, eps=c["eps"])
        self.qkv_proj = Linear(h, 3 * h, bias=False)
        self.fc_in = Linear(h, c["inner"])
        self.fc_out = Linear(c["inner"], h)
        self.act = act_fn(c["act"])

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.ln_1(x)
        q, k, v = split_qkv(self.qkv_proj(h), self.heads, self.heads, self.head_dim)
        mlp = self.fc_out(self.act(self.fc_in(h)))
        return rotate(q, cos, sin, self.rot, True), rotate(k, cos, sin, self.rot, True), v, mlp


class GPTJAttnOut(nn.Module):
    """x + attention output projection + the parallel MLP's output."""

    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.o_proj = Linear(c["hidden"], c["hidden"], bias=False)

    def forward(self, x: torch.Tensor, attn: torch.Tensor, mlp: torch.Tensor) -> torch.Tensor:
        proj: torch.Tensor = self.o_proj(attn)
        return x + proj + mlp


def parse_gptj_config(hf: dict[str, Any]) -> dict[str, Any]:
    hidden = cfg_get(hf, "n_embd", int)
    heads = cfg_get(hf, "n_head", int)
    if hidden % heads:
        raise ValueError("config.json: n_embd must be a multiple of n_head")
    head_dim = hidden // heads
    rot = hf.get("rotary_dim") or head_dim
    if not isinstance(rot, int) or rot % 2 or rot > head_dim:
        raise ValueError(
            f"config.json: field 'rotary_dim' must be an even int <= head dim, got {rot!r}"
        )
    return {
        "hidden": hidden,
        "heads": heads,
        "head_dim": head_dim,
        "rot": rot,
        "layers": cfg_get(hf, "n_layer", int),
        "inner": hf.get("n_inner") or 4 * hidden,
        "vocab": cfg_get(hf, "vocab_size", int),
        "max_len": cfg_get(hf, "n_positions", int, 2048),
        "eps": cfg_get(hf, "layer_norm_epsilon", float, 1e-5),
        "act": hf.get("activation_function", "gelu_new"),
    }


class GPTJForCausalLM(CausalLM):
    def __init__(self, hf: dict[str, Any]) -> None:
        super().__init__()
        c = parse_gptj_config(hf)
        self.num_layers, self.num_kv_heads, self.head_dim = c["layers"], c["heads"], c["head_dim"]
        self.vocab_size, self.max_model_len = c["vocab"], c["max_len"]
        self.rotary = RotaryTable(c["rot"], rope_inv_freq(c["rot"], 10000.0, None), c["max_len"])
        self.wte = Embedding(c["vocab"], c["hidden"])
        self.h = nn.ModuleList(
            DecoderLayer(GPTJAttnIn(c), GPTJAttnOut(c), c["head_dim"]) for _ in range(c["layers"])
        )
        self.ln_f = nn.LayerNorm(c["hidden"], eps=c["eps"])
        self.lm_head = Linear(c["hidden"], c["vocab"])

    def embed(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x: torch.Tensor = self.wte(input_ids)
        return x

    def rotation(self, positions: torch.Tensor, dtype: torch.dtype) -> Any:
        return self.rotary.cos_sin(positions, dtype)

    def decoder_layers(self) -> nn.ModuleList:
        return self.h

    def final_norm(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.ln_f(x)
        return out

    def load_weights(self, src: WeightSource) -> None:
        load_param(self.wte.weight, src.get("transformer.wte.weight"), "transformer.wte.weight")
        for mod, name in ((self.ln_f, "transformer.ln_f"), (self.lm_head, "lm_head")):
            load_param(mod.weight, src.get(name + ".weight"), name + ".weight")
            load_param(mod.bias, src.get(name + ".bias"), name + ".bias")
        for i, block in enumerate(self.h):
            p = f"transformer.h.{i}."
            layer = cast(DecoderLayer, block)
            a = cast(GPTJAttnIn, layer.attn_in)
            o = cast(GPTJAttnOut, layer.attn_out)
            qkv = torch.cat([src.get(f"{p}attn.{n}_proj.weight") for n in "qkv"])
            load_param(a.qkv_proj.weight, qkv, p + "attn.qkv_proj.weight")
            load_param(o.o_proj.weight, src.get(p + "attn.out_proj.weight"), p + "attn.out_proj")
            for mod, name in ((a.ln_1, "ln_1"), (a.fc_in, "mlp.fc_in"), (a.fc_out, "mlp.fc_out")):
                load_param(mod.weight, src.get(f"{p}{name}.weight"), p + name)
                load_param(mod.bias, src.get(f"{p}{name}.bias"), p + name)
