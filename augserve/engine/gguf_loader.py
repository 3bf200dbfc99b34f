"""Read a GGUF file (llama.cpp's format) with the `gguf` package from llama.cpp.

`GGUFFile(path)` memory-maps the file and checks that the engine can run it: a
supported architecture and tensor types `gguf.quants.dequantize` knows, else a
one-line ValueError naming what is not supported. `hf_config(gguf)` maps its
metadata onto the Hugging Face config.json fields the engine's models read.
`GGUFWeights` serves the tensors under their Hugging Face names, like
`loader.WeightSource`: each is dequantized to float32 when the model asks for
it and copied into the engine's dtype by the model's loader, so a quantized
file is never expanded on disk nor held whole in float32 in memory.

llama.cpp's converter permutes the rows of a Llama model's Q and K projections
(its RoPE pairs dimension i with i + 1, Hugging Face's with i + head_dim / 2);
`GGUFWeights` undoes it. Qwen2 files are written without that permutation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from augserve.engine.gguf_quant import qtensor_from_gguf
from augserve.engine.quant import QTensor

# GGUF architecture -> (Hugging Face architecture, Q/K rows permuted by the converter)
ARCHITECTURES: dict[str, tuple[str, bool]] = {
    "llama": ("LlamaForCausalLM", True),
    "qwen2": ("Qwen2ForCausalLM", False),
}
PROGRESS_MIN_BYTES = 256 * 2**20  # a progress bar while loading files at least this big

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_LAYER_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a GGUF tensor of a Llama-family model; None if unknown."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _LAYER_RE.fullmatch(gguf_name)
    if m is None or m.group(2) not in _LAYER_NAMES:
        return None
    return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"


def reverse_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's `permute` of Q/K rows: per head, rows (pairs, 2) -> (2, pairs)."""
    half = w.shape[0] // n_head // 2
    return w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


class GGUFFile:
    """A GGUF file's metadata and tensors, checked for what the engine can run."""

    def __init__(self, path: str | Path) -> None:
        import gguf

        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"GGUF file not found: {self.path}")
        try:
            self.reader = gguf.GGUFReader(str(self.path))
        except (ValueError, OSError) as e:
            raise ValueError(f"{self.path}: not a readable GGUF file ({e})") from None
        self.arch = str(self.value("general.architecture", ""))
        if self.arch not in ARCHITECTURES:
            raise ValueError(
                f"{self.path.name}: GGUF architecture {self.arch!r} is not supported "
                f"(supported: {', '.join(sorted(ARCHITECTURES))})"
            )
        self.tensors = {t.name: t for t in self.reader.tensors}
        self._check_tensors()

    def value(self, key: str, default: Any = None) -> Any:
        """A metadata value (str, number, bool or list), or `default` if absent."""
        field = self.reader.fields.get(key)
        return default if field is None else field.contents()

    def arch_value(self, key: str, default: Any = None) -> Any:
        return self.value(f"{self.arch}.{key}", default)

    def _check_tensors(self) -> None:
        from gguf import GGMLQuantizationType as Q
        from gguf.quants import dequantize

        tried: set[int] = set()
        for t in self.tensors.values():
            if hf_name(t.name) is None:
                raise ValueError(
                    f"{self.path.name}: tensor {t.name!r} is not supported for "
                    f"architecture {self.arch!r} (rope scaling tensors and extra heads are not)"
                )
            if int(t.tensor_type) in tried:
                continue
            tried.add(int(t.tensor_type))
            try:  # one row: cheap, and names a type the package cannot dequantize
                dequantize(t.data[:1], Q(t.tensor_type))
            except (NotImplementedError, ValueError, KeyError):
                raise ValueError(
                    f"{self.path.name}: tensor type {Q(t.tensor_type).name} (tensor {t.name!r}) "
                    "is not supported"
                ) from None


def hf_config(g: GGUFFile) -> dict[str, Any]:
    """The Hugging Face config.json fields of a GGUF model."""
    hidden = int(g.arch_value("embedding_length"))
    heads = int(g.arch_value("attention.head_count"))
    kv_heads = g.arch_value("attention.head_count_kv", heads)
    head_dim = int(g.arch_value("attention.key_length", hidden // heads))
    rope_dim = int(g.arch_value("rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise ValueError(f"{g.path.name}: partial rotary (rope.dimension_count) is not supported")
    scaling = str(g.arch_value("rope.scaling.type", "none"))
    if scaling not in ("none", "linear"):
        raise ValueError(f"{g.path.name}: rope scaling {scaling!r} is not supported")
    tokens = g.value("tokenizer.ggml.tokens") or []
    hf_arch, _ = ARCHITECTURES[g.arch]
    cfg: dict[str, Any] = {
        "architectures": [hf_arch],
        "model_type": g.arch,
        "hidden_size": hidden,
        "num_hidden_layers": int(g.arch_value("block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(kv_heads if not isinstance(kv_heads, list) else kv_heads[0]),
        "head_dim": head_dim,
        "intermediate_size": int(g.arch_value("feed_forward_length")),
        "vocab_size": int(g.arch_value("vocab_size", len(tokens))),
        "max_position_embeddings": int(g.arch_value("context_length", 4096)),
        "rms_norm_eps": float(g.arch_value("attention.layer_norm_rms_epsilon", 1e-6)),
        "rope_theta": float(g.arch_value("rope.freq_base", 10000.0)),
        "hidden_act": "silu",
        "tie_word_embeddings": "output.weight" not in g.tensors,
        "attention_bias": "blk.0.attn_q.bias" in g.tensors,
    }
    if scaling == "linear":
        cfg["rope_scaling"] = {
            "type": "linear",
            "factor": float(g.arch_value("rope.scaling.factor")),
        }
    for key, name in (
        ("bos_token_id", "bos"),
        ("eos_token_id", "eos"),
        ("pad_token_id", "padding"),
    ):
        tid = g.value(f"tokenizer.ggml.{name}_token_id")
        if tid is not None:
            cfg[key] = int(tid)
    return cfg


def _hf_shape(t: Any) -> list[int]:
    return [int(d) for d in reversed(t.shape.tolist())]  # GGUF lists dims innermost first


def tensor_index(g: GGUFFile) -> dict[str, Any]:
    """Where each tensor lies in the file (by Hugging Face name), and what the loader needs
    besides: kept next to the model directory, so that loading skips `GGUFReader`'s slow
    parse of the whole metadata (the vocabulary is a hundred thousand strings)."""
    cfg = hf_config(g)
    tensors = {
        hf_name(t.name): [int(t.data_offset), int(t.n_bytes), int(t.tensor_type), _hf_shape(t)]
        for t in g.tensors.values()
    }
    heads = {"q": cfg["num_attention_heads"], "k": cfg["num_key_value_heads"]}
    return {"permuted": ARCHITECTURES[g.arch][1], "heads": heads, "tensors": tensors}


class GGUFWeights:
    """Tensors of a GGUF file by Hugging Face name (the `loader.WeightSource` interface).
    `index`: `tensor_index` of the same file (else it is read with GGUFReader)."""

    def __init__(
        self, path: str | Path, progress: bool | None = None, index: dict[str, Any] | None = None
    ) -> None:
        self.path = Path(path)
        if index is None:
            index = tensor_index(GGUFFile(path))
        self._data = np.memmap(self.path, dtype=np.uint8, mode="r")
        self._heads: dict[str, int] = index["heads"]
        self._permuted = bool(index["permuted"])
        self._tensors: dict[str, list[Any]] = index["tensors"]
        if progress is None:
            progress = self.path.stat().st_size >= PROGRESS_MIN_BYTES
        self._bar: Any = None
        if progress:
            from tqdm import tqdm  # type: ignore[import-untyped]

            self._bar = tqdm(
                total=len(self._tensors), desc=f"loading {self.path.name}", unit="tensor"
            )

    def names(self) -> list[str]:
        return list(self._tensors)

    def has(self, name: str) -> bool:
        return name in self._tensors

    def get(self, name: str) -> torch.Tensor:
        """The tensor dequantized to float32, in Hugging Face layout."""
        from gguf import GGMLQuantizationType as Q
        from gguf.quants import dequantize

        if name not in self._tensors:
            raise ValueError(f"weight {name!r} not found in {self.path}")
        offset, n_bytes, qtype, shape = self._tensors[name]
        raw = np.asarray(self._data[offset : offset + n_bytes])
        w = dequantize(raw, Q(qtype)).astype(np.float32, copy=False).reshape(shape)
        proj = name.rsplit(".", 2)[-2]
        if self._permuted and proj in ("q_proj", "k_proj"):
            w = reverse_permute(w, self._heads[proj[0]])
        if self._bar is not None:
            self._bar.update(1)
        w = np.ascontiguousarray(w)
        return torch.from_numpy(w if w.flags.writeable else w.copy())  # F32: a read-only mmap

    def get_raw(self, name: str) -> tuple[np.ndarray, int, list[int]]:
        """A tensor's bytes as stored (not dequantized), its GGUF type and HF shape."""
        if name not in self._tensors:
            raise ValueError(f"weight {name!r} not found in {self.path}")
        offset, n_bytes, qtype, shape = self._tensors[name]
        return np.asarray(self._data[offset : offset + n_bytes]), int(qtype), list(shape)

    def get_quant(self, name: str) -> QTensor:
        """A 2-D weight kept quantized (`gguf_quant.qtensor_from_gguf`), HF row order."""
        raw, qtype, shape = self.get_raw(name)
        if len(shape) != 2:
            raise ValueError(f"weight {name!r} is not a matrix: shape {shape}")
        qt = qtensor_from_gguf(raw, qtype, (shape[0], shape[1]))
        proj = name.rsplit(".", 2)[-2]
        if self._permuted and proj in ("q_proj", "k_proj"):
            qt = qt.rows(reverse_permute(np.arange(shape[0]), self._heads[proj[0]]))
        if self._bar is not None:
            self._bar.update(1)
        return qt

    def first(self, *names: str) -> torch.Tensor:
        for n in names:
            if self.has(n):
                return self.get(n)
        raise ValueError(f"none of the weights {names} found in {self.path}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        del self._data
