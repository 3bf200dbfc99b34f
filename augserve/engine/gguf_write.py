"""Write a GGUF file from a make_model directory, as llama.cpp's converter does: the
`gguf` package's GGUFWriter, llama.cpp tensor names, Llama Q/K rows permuted for
llama.cpp's RoPE, the tokenizer as `tokenizer.ggml.*` metadata. For tests and for
`benchmarks/bench_vs_llamacpp.py` (a random >= 0.5B model quantized to Q4_0)."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
from safetensors.numpy import load_file

from augserve.engine.gguf_loader import _GLOBAL_NAMES, _LAYER_NAMES

HF_TO_GGUF = {v: k for k, v in _GLOBAL_NAMES.items()}


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py's LlamaModel.permute (the forward direction)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def gguf_name(hf: str) -> str:
    if hf in HF_TO_GGUF:
        return HF_TO_GGUF[hf]
    _, _, layer, *rest = hf.split(".")
    module, kind = ".".join(rest[:-1]), rest[-1]
    short = {v: k for k, v in _LAYER_NAMES.items()}[module]
    return f"blk.{layer}.{short}.{kind}"


def _tokenizer(w: gguf.GGUFWriter, model_dir: Path, chat_template: str | None) -> None:
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    vocab: dict[str, int] = spec["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    special = {a["content"] for a in spec.get("added_tokens", []) if a.get("special")}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types([3 if t in special else 1 for t in tokens])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_pad_token_id(2)
    w.add_add_bos_token(True)
    if chat_template is not None:
        w.add_chat_template(chat_template)


def write_gguf(
    model_dir: Path,
    out: Path,
    qtype: gguf.GGMLQuantizationType | None = None,
    arch: str = "llama",
    chat_template: str | None = None,
) -> Path:
    """A GGUF of a make_model llama/qwen2 directory; 2-D weights in `qtype` if given."""
    cfg = json.loads((model_dir / "config.json").read_text())
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = gguf.GGUFWriter(str(out), arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_vocab_size(cfg["vocab_size"])
    _tokenizer(w, model_dir, chat_template)
    for name, t in load_file(str(model_dir / "model.safetensors")).items():
        t = t.astype(np.float32, copy=False)
        if arch == "llama" and (".q_proj." in name or ".k_proj." in name):
            t = permute(t, heads if ".q_proj." in name else kv_heads)
        if qtype is not None and t.ndim == 2:
            w.add_tensor(gguf_name(name), gguf.quants.quantize(t, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gguf_name(name), t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
