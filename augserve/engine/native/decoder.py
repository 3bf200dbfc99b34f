"""A Llama-family decode step in one native call (`decode.c`'s `aug_llama_decode`).

For a quantized Llama / Mistral / Qwen2 model whose projections are all `NativeMatrix`
weights, a step of decodes only (every sequence one new token) runs every layer in C:
RMSNorm, the fused QKV product, neox rotary, the K/V write into the paged cache,
attention over each sequence's blocks in place (no gathered copy), the output
projection, the gated MLP and the residuals, float32 throughout, the KV cache in the
model's dtype (float32 or bf16). The torch modules stay the reference and run every
step with a prefill chunk in it. What is handed to C (weight pointers, caches, norms
as float32 copies, the rotary tables) is fixed when the decoder is built; the tensors
it points into live as long as the model and the cache do.
"""

from __future__ import annotations

import ctypes
from typing import Any, cast

import torch

from augserve.engine.attention import AttentionMetadata
from augserve.engine.native.build import load
from augserve.engine.native.qmatrix import NativeMatrix

_P = ctypes.c_void_p


class _QMat(ctypes.Structure):
    _fields_ = [("w", _P), ("fmt", ctypes.c_int32), ("n", ctypes.c_int32),
                ("k", ctypes.c_int32), ("bias", _P)]  # fmt: skip


class _Layer(ctypes.Structure):
    _fields_ = [("qkv", _QMat), ("o", _QMat), ("gate_up", _QMat), ("down", _QMat),
                ("in_norm", _P), ("post_norm", _P), ("kc", _P), ("vc", _P)]  # fmt: skip


class _Model(ctypes.Structure):
    _fields_ = [
        ("n_layers", ctypes.c_int32), ("hidden", ctypes.c_int32), ("heads", ctypes.c_int32),
        ("kv_heads", ctypes.c_int32), ("head_dim", ctypes.c_int32), ("inter", ctypes.c_int32),
        ("block_size", ctypes.c_int32), ("cache_kind", ctypes.c_int32), ("eps", ctypes.c_float),
        ("scale", ctypes.c_float), ("cos_t", _P), ("sin_t", _P), ("final_norm", _P),
        ("layers", ctypes.POINTER(_Layer)),
    ]  # fmt: skip


CACHE_KINDS = {torch.float32: 0, torch.bfloat16: 1}


def _native_of(linear: Any) -> NativeMatrix | None:
    return cast(NativeMatrix | None, getattr(linear, "native", None))


class NativeDecoder:
    """Decode steps of one model over one KV cache (see the module doc). Build it with
    `for_model`, which returns None where the model or the cache has no native form."""

    def __init__(self, model: Any, k_caches: list[torch.Tensor], v_caches: list[torch.Tensor],
                 block_size: int) -> None:  # fmt: skip
        c = model.c
        self.hidden = int(c["hidden"])
        self._keep: list[torch.Tensor] = []  # every tensor C points into, alive with us
        layers = (_Layer * len(model.layers))()
        for i, layer in enumerate(model.layers):
            a, o = layer.attn_in, layer.attn_out
            layers[i] = _Layer(
                self._qmat(a.qkv_proj), self._qmat(o.o_proj), self._qmat(o.gate_up_proj),
                self._qmat(o.down_proj), self._f32(a.input_layernorm.weight),
                self._f32(o.post_attention_layernorm.weight), k_caches[i].data_ptr(),
                v_caches[i].data_ptr(),
            )  # fmt: skip
        rot = model.rotary
        self._layers = layers
        self._model = _Model(
            len(model.layers), self.hidden, c["heads"], c["kv_heads"], c["head_dim"],
            c["intermediate"], block_size, CACHE_KINDS[k_caches[0].dtype], float(c["eps"]),
            float(c["head_dim"]) ** -0.5, self._f32(rot._cos), self._f32(rot._sin),
            self._f32(model.norm.weight), layers,
        )  # fmt: skip
        self._lib = load()
        self._work = torch.empty(0, dtype=torch.uint8)
        self.embed = model.embed

    @classmethod
    def for_model(cls, model: Any, k_caches: list[torch.Tensor], v_caches: list[torch.Tensor],
                  block_size: int) -> NativeDecoder | None:  # fmt: skip
        """A decoder, or None: not a Llama-family model with SiLU, a projection without a
        native weight, a cache neither float32 nor bf16, or the rotary not full-width neox."""
        c = getattr(model, "c", None)
        if c is None or not hasattr(model, "layers") or not hasattr(model, "rotary"):
            return None
        if c.get("act") not in ("silu", "swish"):
            return None
        if k_caches[0].dtype not in CACHE_KINDS or k_caches[0].device.type != "cpu":
            return None
        if model.rotary.rot_dim != c["head_dim"] or c["head_dim"] % 2:
            return None
        for layer in model.layers:
            a, o = layer.attn_in, layer.attn_out
            if any(_native_of(m) is None for m in (a.qkv_proj, o.o_proj, o.gate_up_proj,
                                                   o.down_proj)):  # fmt: skip
                return None
        return cls(model, k_caches, v_caches, block_size)

    def _f32(self, t: torch.Tensor) -> int:
        f = t.detach().to(torch.float32).contiguous()
        self._keep.append(f)
        return int(f.data_ptr())

    def _qmat(self, linear: Any) -> _QMat:
        w = _native_of(linear)
        assert w is not None
        bias = None if linear.bias is None else self._f32(linear.bias)
        return _QMat(w.data.data_ptr(), w.fmt, w.n, w.k, bias)

    def decode(self, input_ids: torch.Tensor, positions: torch.Tensor,
               meta: AttentionMetadata) -> torch.Tensor:  # fmt: skip
        """Hidden states [B, hidden] float32 (final norm applied) of a decode-only step;
        writes each sequence's new K/V."""
        tables, lens = meta.decode_block_tables, meta.decode_ctx_lens
        assert tables is not None and lens is not None and not meta.prefills
        b = int(input_ids.shape[0])
        x = self.embed(input_ids, positions).to(torch.float32).contiguous()
        out = torch.empty(b, self.hidden, dtype=torch.float32)
        model = ctypes.addressof(self._model)
        need = int(self._lib.aug_llama_workspace(model, b))
        if self._work.numel() < need:
            self._work = torch.empty(need, dtype=torch.uint8)
        tables, lens = tables.contiguous(), lens.contiguous()
        pos, slots = positions.contiguous(), meta.slot_mapping.contiguous()
        self._lib.aug_llama_decode(
            model, x.data_ptr(), b, pos.data_ptr(), tables.data_ptr(),
            tables.shape[1], lens.data_ptr(), slots.data_ptr(), out.data_ptr(),
            self._work.data_ptr(), torch.get_num_threads(),
        )  # fmt: skip
        return out
