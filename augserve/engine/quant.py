"""Weight-only quantized linear layers and embeddings (CPU), for GGUF weights kept quantized.

A `QTensor` is a weight [N, K] in one of three forms:

- int4, group g along K: w[n, k] = (q[n, k] - 8) * scale[n, k // g] + zero[n, k // g],
  q in 0..15 (torch's int4 weight-only form; GGUF's Q4_0, Q4_1 and Q4_K are exactly
  this with g = 32, see `gguf_quant.py`);
- int8, group g along K: w[n, k] = q[n, k] * scale[n, k // g] (+ zero[n, k // g] if
  given), q in -128..127; g = K is one scale per output channel (`quantize_int8`), g = 32
  GGUF's Q8_0 exactly;
- dense: `q` is the float32 weight itself (GGUF's F32 / F16 / BF16 tensors).

`QuantLinear` holds one in the layout of torch's CPU kernels (measured against bf16 and
fp32 linear layers in `benchmarks/bench_quant_kernels.py`, docs/models.md):
`_weight_int4pack_mm_for_cpu` on `_convert_weight_to_int4pack_for_cpu`'s packing, and
`_weight_int8pack_mm` (one scale per channel only). An int8 weight in groups of 32 runs
as two int4 planes stacked along N, exactly (`int8_planes`): torch's int4 kernel reads
the same bytes faster than its int8 kernel, and has the groups the int8 one lacks.
Activations run in the model's dtype (bf16 by default for GGUF).
`QuantEmbedding` (quant_embed.py) keeps a GGUF embedding table as the file's own bytes
and dequantizes only the rows a step looks up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from augserve.engine.cpu_info import cpu_has_bf16
from augserve.engine.native import qmatrix as nq
from augserve.engine.native.build import available
from augserve.engine.qtensor import INT4_OFFSET, QTensor
from augserve.engine.quant_embed import QuantEmbedding
from augserve.engine.quant_prefill import dequantize_packed, use_dequantized

__all__ = ["INT4_OFFSET", "QTensor", "QuantLinear"]  # QTensor lives in qtensor.py

QK = 32  # the native kernels' block
# From this many rows a product on the native blocks dequantizes the weight and runs one
# dense matmul: the integer kernel costs in proportion to the rows, oneDNN's bf16 matmul
# far less. Side by side (benchmarks/bench_native_kernels.py, docs/data/native-kernels.json,
# ms, integer / dequantize + bf16): 9728 x 896 at 16 rows 0.81 / 1.16, at 32 rows 3.46 /
# 1.69; 896 x 4864 at 16 rows 0.57 / 0.53, at 32 1.98 / 0.79; set between the two.
# Weights grouped by 16 rows (native/gemm16.c) keep the same threshold although their
# integer product beats the dense one up to ~128 rows (docs/data/native-kernels-g16.json,
# 2 threads: 9728 x 896 at 64 rows 1.01 / 2.50 ms): prefill-sized products stay on bf16
# activations for their precision: with the threshold at 128 (int8 activations below
# it), a 40-token chat prefill turned SmolLM2's Q4_1 "Paris" into "Le Grand Chateau"
# (tests/engine/test_smollm2.py). A decode step's products (the fused native step) are
# int8 at any batch, as llama.cpp's. On AVX2 builds (no bf16 instructions, so the dense
# product is float32) grouped weights take int16 activations from this threshold on
# instead (`nq.matmul_wide`, gemm16w.c: finer than bf16, 1.2-4x the float32 product;
# docs/engine-quant.md, "Prefill on AVX2").
NATIVE_DENSE_ROWS = 24


def quantize_int8(w: torch.Tensor) -> QTensor:
    """Symmetric int8 per output channel of a float weight [N, K]."""
    w = w.float()
    scale = (w.abs().amax(dim=1, keepdim=True) / 127).clamp_min(torch.finfo(torch.float32).tiny)
    q = torch.round(w / scale).clamp_(-127, 127).to(torch.int8)
    return QTensor(q, scale, None, int(w.shape[1]), 8)


def int8_of_int4(qt: QTensor) -> QTensor:
    """An int4 weight in the int8 form of the same groups, exactly."""
    q = (qt.q.to(torch.int16) - INT4_OFFSET).to(torch.int8)
    return QTensor(q, qt.scale, qt.zero, qt.group, 8)


def int8_planes(qt: QTensor) -> tuple[QTensor, QTensor]:
    """An int8 weight in groups as two int4 weights of the same groups whose sum it is,
    exactly: with u = q + 128 = 16 hi + lo (hi, lo in 0..15),
    q s + z = 16 s (hi - 8) + s (lo - 8) + (8 s + z)."""
    assert qt.bits == 8 and qt.scale is not None
    u = qt.q.to(torch.int16) + 128
    s, z = qt.scale, qt.zero if qt.zero is not None else torch.zeros_like(qt.scale)
    hi = QTensor((u >> 4).to(torch.uint8), 16 * s, torch.zeros_like(s), qt.group, 4)
    lo = QTensor((u & 15).to(torch.uint8), s, 8 * s + z, qt.group, 4)
    return hi, lo


def cat_rows(parts: Sequence[QTensor]) -> QTensor:
    """Stack weights along N (fused QKV, gate+up). Parts in one form stay in it; int4 and
    int8 in the same groups meet in int8 of those groups (exact); other mixes in the
    widest form (dense, else int8 per channel, requantized)."""
    first = parts[0]
    if len(parts) == 1:
        return first
    same = all((p.bits, p.group) == (first.bits, first.group) for p in parts)
    if not same and all(p.bits in (4, 8) and p.group == first.group for p in parts):
        parts = [int8_of_int4(p) if p.bits == 4 else p for p in parts]
        zeros = [p.zero is not None for p in parts]
        if any(zeros) and not all(zeros):
            parts = [p if p.zero is not None else _with_zero(p) for p in parts]
        first, same = parts[0], True
    if not same:
        bits = max(p.bits for p in parts)
        dense = torch.cat([p.dequantize() for p in parts])
        return QTensor(dense, None, None, 0, 16) if bits == 16 else quantize_int8(dense)

    def cat(ts: list[torch.Tensor | None]) -> torch.Tensor | None:
        return None if ts[0] is None else torch.cat([t for t in ts if t is not None])

    return QTensor(
        torch.cat([p.q for p in parts]),
        cat([p.scale for p in parts]),
        cat([p.zero for p in parts]),
        first.group,
        first.bits,
    )


def _with_zero(qt: QTensor) -> QTensor:
    assert qt.scale is not None
    return replace(qt, zero=torch.zeros_like(qt.scale))


def native_wanted(qt: QTensor) -> bool:
    """Whether a weight goes to the native kernels (native/): they build here, are not
    turned off (AUGSERVE_NATIVE=0), and `qt` has a block form. They quantize the
    activations to int8 (as llama.cpp does); a model asked for float32 activations keeps
    torch's kernels, whose products equal the dequantized weight's (docs/engine-quant.md)."""
    return nq.packable(qt) and available()


def int4_packable(n: int, k: int, group: int) -> bool:
    """Whether torch's CPU int4 kernel takes this shape (K even, whole groups)."""
    return k % 2 == 0 and group in (32, 64, 128, 256) and k % group == 0


class QuantLinear(nn.Module):
    """A linear layer on a weight-only quantized weight (see the module doc). Built empty
    (the bias, if any, is its only parameter); `set_weight` fills it."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool, act_dtype: torch.dtype
    ) -> None:
        super().__init__()
        self.in_features, self.out_features, self.act_dtype = in_features, out_features, act_dtype
        self.bias = nn.Parameter(torch.empty(out_features, dtype=act_dtype)) if bias else None
        self.bits = 0  # 0 until set_weight
        self.group = 0
        self.planes = 1  # 2: int8 in groups as two int4 planes stacked along N
        self.native: nq.NativeMatrix | None = None  # the native kernels' form (native/)
        self.packed: torch.Tensor | None  # int4: packed; int8: q; dense: the weight
        self.scales: torch.Tensor | None  # int4: [K/g, N, 2]; int8: [N]
        self.register_buffer("packed", None, persistent=False)
        self.register_buffer("scales", None, persistent=False)

    def set_weight(self, qt: QTensor) -> None:
        """Take `qt` [out, in] in the kernels' layout, scales in the activations' dtype."""
        act_dtype = self.act_dtype
        if qt.shape != (self.out_features, self.in_features):
            raise ValueError(
                f"weight shape {qt.shape} != ({self.out_features}, {self.in_features})"
            )
        n, k = qt.shape
        self.native = None
        if act_dtype != torch.float32 and native_wanted(qt):  # fp32: torch's exact kernels
            self.native, self.bits, self.group = nq.pack(qt), qt.bits, QK
            self.packed = self.scales = None
            return
        grouped8 = qt.bits == 8 and qt.group < k  # runs as two int4 planes
        if (qt.bits == 4 or grouped8) and not int4_packable(n, k, qt.group):
            qt = quantize_int8(qt.dequantize())  # per channel
        self.planes = 1
        if qt.bits == 8 and qt.group < k:
            qt, self.planes = cat_rows(int8_planes(qt)), 2
        self.bits, self.group = qt.bits, qt.group
        if qt.bits == 4:
            assert qt.scale is not None and qt.zero is not None
            self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
                qt.q.to(torch.int32), 1
            )
            sz = torch.stack([qt.scale.t(), qt.zero.t()], dim=-1)
            self.scales = sz.to(act_dtype).contiguous()
        elif qt.bits == 8:
            assert qt.scale is not None and qt.zero is None
            self.packed = qt.q.contiguous()
            self.scales = qt.scale.reshape(-1).to(act_dtype).contiguous()
        else:
            self.packed = qt.q.to(act_dtype).contiguous()
            self.scales = None

    @property
    def loaded(self) -> bool:
        return self.native is not None or self.packed is not None

    def weight_bytes(self) -> int:
        if self.native is not None:
            return self.native.nbytes
        return sum(
            t.numel() * t.element_size() for t in (self.packed, self.scales) if t is not None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:
            y2 = self._matmul(x.reshape(-1, x.shape[-1]))
            return y2.reshape(*x.shape[:-1], self.out_features)
        return self._matmul(x)

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        """x [M, K] -> [M, N] in x's dtype; no op is dispatched that would do nothing (a
        decode step runs 4 of these a layer: each op is microseconds of overhead)."""
        if self.native is not None:
            return self._native_matmul(x)
        packed, scales = self.packed, self.scales
        if packed is None:
            raise RuntimeError("QuantLinear used before set_weight")
        act = packed.dtype if scales is None else scales.dtype
        xa = x if x.dtype == act else x.to(act)
        y: torch.Tensor
        if self.bits == 4 and use_dequantized(x.shape[0], packed.shape[0]):
            assert scales is not None  # prefill-sized: quant_prefill.py
            y = F.linear(xa, dequantize_packed(packed, scales, self.group))
        elif self.bits == 4:
            y = torch.ops.aten._weight_int4pack_mm_for_cpu(xa, packed, self.group, scales)
        elif self.bits == 8:
            y = torch.ops.aten._weight_int8pack_mm(xa, packed, scales)
        else:
            y = F.linear(xa, packed)
        if self.planes == 2:
            n = self.out_features
            y = y[:, :n] + y[:, n:]
        if self.bias is not None:
            y.add_(self.bias)
        return y if y.dtype == x.dtype else y.to(x.dtype)

    def _native_matmul(self, x: torch.Tensor) -> torch.Tensor:
        """The native kernels (native/qmatrix.py): int8 activations against the blocks,
        float32 out; from NATIVE_DENSE_ROWS rows on, one dense product on the dequantized
        weight instead (bf16 where the CPU has bf16 instructions, else float32), or on
        AVX2 builds int16 activations against grouped weights (`nq.matmul_wide`)."""
        w = self.native
        assert w is not None
        if x.shape[0] >= NATIVE_DENSE_ROWS and w.grouped and nq.wide_by_default():
            y = nq.matmul_wide(x, w)
        elif x.shape[0] >= NATIVE_DENSE_ROWS:
            dtype = torch.bfloat16 if cpu_has_bf16() else torch.float32
            y = F.linear(x.to(dtype), nq.dequantize(w, dtype, reuse=True))
        else:
            y = nq.matmul(x, w)
        if self.bias is not None:
            y = y + self.bias
        return y if y.dtype == x.dtype else y.to(x.dtype)

    def extra_repr(self) -> str:
        form = {4: f"int4 group {self.group}", 8: "int8 per channel", 16: "dense"}
        kind = form.get(self.bits, "empty")
        if self.native is not None:
            kind = f"native q{self.native.kind} blocks of {QK} (format {self.native.fmt})"
        elif self.planes == 2:
            kind = f"int8 group {self.group} as two int4 planes"
        return f"in={self.in_features}, out={self.out_features}, {kind}"


def quant_modules(model: nn.Module) -> list[Any]:
    return [m for m in model.modules() if isinstance(m, QuantLinear | QuantEmbedding)]


def check_loaded(model: nn.Module, where: str) -> None:
    """ValueError naming the first quantized module the loader left empty."""
    for name, m in model.named_modules():
        empty = (isinstance(m, QuantLinear) and not m.loaded) or (
            isinstance(m, QuantEmbedding) and not m.loaded
        )
        if empty:
            raise ValueError(f"{where}: weight {name} was not loaded")


def logical_numel(model: nn.Module) -> int:
    """Parameters counted as the full-precision model would have them."""
    n = sum(p.numel() for p in model.parameters())
    for m in model.modules():
        if isinstance(m, QuantLinear):
            n += m.in_features * m.out_features
        elif isinstance(m, QuantEmbedding):
            n += m.num_embeddings * m.embedding_dim
    return n


def weight_bytes(model: nn.Module) -> int:
    """Bytes of every parameter and quantized weight (what loading keeps resident)."""
    n = sum(p.numel() * p.element_size() for p in model.parameters())
    quantized: int = sum(m.weight_bytes() for m in quant_modules(model))
    return n + quantized


def load_linear(module: nn.Module, src: Any, names: Sequence[str], label: str) -> bool:
    """Fill a QuantLinear from the quantized tensors `names` of `src` (stacked along the
    output dim); False (nothing done) when `module` is not one."""
    if not isinstance(module, QuantLinear):
        return False
    try:
        module.set_weight(cat_rows([src.get_quant(n) for n in names]))
    except ValueError as e:
        raise ValueError(f"weight {label}: {e}") from None
    return True


def load_embedding(module: nn.Module, src: Any, name: str) -> bool:
    """Fill a QuantEmbedding with the raw GGUF tensor `name`; False when not one."""
    if not isinstance(module, QuantEmbedding):
        return False
    raw, qtype, shape = src.get_raw(name)
    if tuple(shape) != (module.num_embeddings, module.embedding_dim):
        raise ValueError(f"weight {name}: shape {tuple(shape)} != embedding's")
    module.set_raw(raw, qtype)
    return True
