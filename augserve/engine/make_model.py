"""Write random-weight Hugging Face-format model dirs for tests and benchmarks.

`make_model(arch, preset, out_dir, seed)` writes config.json (architectures /
model_type that transformers loads), model.safetensors (HF weight names),
generation_config.json, tokenizer.json and tokenizer_config.json (the tokenizer:
`make_tokenizer.build_tokenizer`). Nothing is downloaded.

`untied=True` gives the model an LM head of its own: a random model with tied
embeddings mostly repeats its last prompt token, so greedy comparisons on it
prove little; the parity tests use untied models.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from augserve.engine.make_tokenizer import build_tokenizer

_COMMON = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2, "torch_dtype": "float32"}

_SIZES = {  # preset: (hidden, layers, heads, kv_heads, ffn, vocab, max_positions)
    "tiny": (64, 2, 4, 2, 128, 512, 512),
    "small": (256, 4, 8, 4, 688, 4096, 2048),
    "100m": (768, 12, 12, 12, 2048, 32000, 2048),  # ~110M params with tied embeddings
}


def _llama_preset(h: int, n: int, a: int, kv: int, f: int, v: int, m: int) -> dict[str, Any]:
    return dict(hidden_size=h, num_hidden_layers=n, num_attention_heads=a,
                num_key_value_heads=kv, intermediate_size=f, vocab_size=v,
                max_position_embeddings=m)  # fmt: skip


def _opt_preset(h: int, n: int, a: int, kv: int, f: int, v: int, m: int) -> dict[str, Any]:
    return dict(hidden_size=h, num_hidden_layers=n, num_attention_heads=a, ffn_dim=4 * h,
                vocab_size=v, max_position_embeddings=m)  # fmt: skip


def _gptj_preset(h: int, n: int, a: int, kv: int, f: int, v: int, m: int) -> dict[str, Any]:
    return dict(n_embd=h, n_layer=n, n_head=a, rotary_dim=(h // a) // 2, vocab_size=v,
                n_positions=m)  # fmt: skip


PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "llama": {k: _llama_preset(*v) for k, v in _SIZES.items()},
    "opt": {k: _opt_preset(*v) for k, v in _SIZES.items()},
    "gptj": {k: _gptj_preset(*v) for k, v in _SIZES.items()},
}
PRESETS["llama"]["100m"]["tie_word_embeddings"] = True
PRESETS["qwen2"] = {k: {**v, "tie_word_embeddings": True} for k, v in PRESETS["llama"].items()}
PRESETS["mistral"] = PRESETS["llama"]

_BASE = {
    "llama": dict(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        hidden_act="silu",
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        attention_bias=False,
        tie_word_embeddings=False,
    ),
    "qwen2": dict(
        architectures=["Qwen2ForCausalLM"],
        model_type="qwen2",
        hidden_act="silu",
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        use_sliding_window=False,
    ),
    "mistral": dict(
        architectures=["MistralForCausalLM"],
        model_type="mistral",
        hidden_act="silu",
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        sliding_window=None,
        tie_word_embeddings=False,
    ),
    "opt": dict(
        architectures=["OPTForCausalLM"],
        model_type="opt",
        do_layer_norm_before=True,
        activation_function="relu",
        enable_bias=True,
        tie_word_embeddings=True,
    ),
    "gptj": dict(
        architectures=["GPTJForCausalLM"],
        model_type="gptj",
        activation_function="gelu_new",
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=False,
    ),
}


def config_for(arch: str, preset: str, overrides: dict[str, Any]) -> dict[str, Any]:
    cfg = {**_COMMON, **_BASE[arch], **PRESETS[arch][preset], **overrides}
    if arch == "opt":
        cfg.setdefault("word_embed_proj_dim", cfg["hidden_size"])
    return cfg


def _llama_shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    h, heads = c["hidden_size"], c["num_attention_heads"]
    kvh = c.get("num_key_value_heads", heads)
    hd = c.get("head_dim", h // heads)
    inter, v = c["intermediate_size"], c["vocab_size"]
    qwen = c["model_type"] == "qwen2"
    attn_bias = bool(c.get("attention_bias", False))
    s: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,)}
    if not c.get("tie_word_embeddings", False):
        s["lm_head.weight"] = (v, h)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        outs = {"q": heads * hd, "k": kvh * hd, "v": kvh * hd}
        for n, o in outs.items():
            s[f"{p}self_attn.{n}_proj.weight"] = (o, h)
            if qwen or attn_bias:
                s[f"{p}self_attn.{n}_proj.bias"] = (o,)
        s[f"{p}self_attn.o_proj.weight"] = (h, heads * hd)
        if attn_bias and not qwen:
            s[f"{p}self_attn.o_proj.bias"] = (h,)
        s[f"{p}mlp.gate_proj.weight"] = (inter, h)
        s[f"{p}mlp.up_proj.weight"] = (inter, h)
        s[f"{p}mlp.down_proj.weight"] = (h, inter)
        s[f"{p}input_layernorm.weight"] = (h,)
        s[f"{p}post_attention_layernorm.weight"] = (h,)
    return s


def _opt_shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    h, f, v = c["hidden_size"], c["ffn_dim"], c["vocab_size"]
    d = "model.decoder."
    s: dict[str, tuple[int, ...]] = {
        d + "embed_tokens.weight": (v, h),
        d + "embed_positions.weight": (c["max_position_embeddings"] + 2, h),
        d + "final_layer_norm.weight": (h,),
        d + "final_layer_norm.bias": (h,),
    }
    if not c.get("tie_word_embeddings", True):
        s["lm_head.weight"] = (v, h)
    for i in range(c["num_hidden_layers"]):
        p = f"{d}layers.{i}."
        for n in ("q", "k", "v", "out"):
            s[f"{p}self_attn.{n}_proj.weight"] = (h, h)
            s[f"{p}self_attn.{n}_proj.bias"] = (h,)
        for n in ("self_attn_layer_norm", "final_layer_norm"):
            s[f"{p}{n}.weight"], s[f"{p}{n}.bias"] = (h,), (h,)
        s[f"{p}fc1.weight"], s[f"{p}fc1.bias"] = (f, h), (f,)
        s[f"{p}fc2.weight"], s[f"{p}fc2.bias"] = (h, f), (h,)
    return s


def _gptj_shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    h, v = c["n_embd"], c["vocab_size"]
    inner = c.get("n_inner") or 4 * h
    s: dict[str, tuple[int, ...]] = {
        "transformer.wte.weight": (v, h),
        "transformer.ln_f.weight": (h,),
        "transformer.ln_f.bias": (h,),
        "lm_head.weight": (v, h),
        "lm_head.bias": (v,),
    }
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        s[p + "ln_1.weight"], s[p + "ln_1.bias"] = (h,), (h,)
        for n in ("q", "k", "v", "out"):
            s[f"{p}attn.{n}_proj.weight"] = (h, h)
        s[p + "mlp.fc_in.weight"], s[p + "mlp.fc_in.bias"] = (inner, h), (inner,)
        s[p + "mlp.fc_out.weight"], s[p + "mlp.fc_out.bias"] = (h, inner), (h,)
    return s


def weight_shapes(arch: str, cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """HF tensor name -> shape for the given config."""
    if arch == "opt":
        return _opt_shapes(cfg)
    if arch == "gptj":
        return _gptj_shapes(cfg)
    return _llama_shapes(cfg)


def _random_tensor(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Random init with well-separated logits (helps exact greedy comparisons)."""
    if name.endswith("bias"):
        return torch.randn(shape, generator=gen) * 0.1
    if len(shape) == 1:  # norm weight
        return 1.0 + torch.randn(shape, generator=gen) * 0.1
    if "embed" in name or "wte" in name:
        return torch.randn(shape, generator=gen)
    fan_in_sqrt: float = shape[1] ** 0.5
    return torch.randn(shape, generator=gen) / fan_in_sqrt


def make_model(
    arch: str,
    preset: str,
    out_dir: str | Path,
    seed: int = 0,
    overrides: dict[str, Any] | None = None,
    untied: bool = False,
) -> Path:
    """Write a random-weight model dir; arch: llama | qwen2 | mistral | opt | gptj,
    preset: tiny | small | 100m. `overrides` patch config.json fields; `untied` sets
    tie_word_embeddings = false (an LM head of its own). Returns the dir."""
    if arch not in PRESETS:
        raise ValueError(f"arch must be one of {sorted(PRESETS)}, got {arch!r}")
    if preset not in PRESETS[arch]:
        raise ValueError(f"preset must be one of {sorted(PRESETS[arch])}, got {preset!r}")
    patch = {**(overrides or {}), **({"tie_word_embeddings": False} if untied else {})}
    cfg = config_for(arch, preset, patch)
    vocab = int(cfg["vocab_size"])
    tok = build_tokenizer(vocab)  # validates vocab_size before anything is written
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    tensors = {
        n: _random_tensor(n, s, gen).contiguous() for n, s in weight_shapes(arch, cfg).items()
    }
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    gen_cfg = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}
    (out / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2))
    tok.save(str(out / "tokenizer.json"))
    tok_cfg = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "add_bos_token": True,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 2048,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2))
    return out


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("arch")
    p.add_argument("preset")
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--untied", action="store_true", help="an LM head of its own")
    a = p.parse_args()
    print(make_model(a.arch, a.preset, a.out_dir, a.seed, untied=a.untied))


if __name__ == "__main__":
    main()
