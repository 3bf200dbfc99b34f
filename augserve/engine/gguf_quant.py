"""GGUF tensors to `quant.QTensor`: which GGUF types stay exactly as they are, which are
requantized (docs/models.md, "GGUF weights kept quantized").

- Q4_0 (w = (q - 8) d), Q4_1 (w = q d + m) and Q4_K (w = q d sc - dmin m per 32) are
  int4 with groups of 32: exact (scale and zero computed in float32 from the file's
  fp16 fields; rounded to the activations' dtype, bf16 by default, when packed).
- Q8_0 (w = q d, q int8) is int8 with groups of 32: exact (run as two int4 planes,
  `quant.int8_planes`; the scales rounded to the activations' dtype as above).
- Q5_0, Q5_1, Q5_K and Q6_K have no such form here and torch's int8 kernel scales per
  output channel only: they are dequantized and requantized to int8 per channel.
- F32, F16, BF16 stay dense.
"""

from __future__ import annotations

import numpy as np
import torch

from augserve.engine.gguf_types import (
    BF16,
    BLOCK_BYTES,
    BLOCK_ELEMS,
    F16,
    F32,
    GROUP,
    Q4_0,
    Q4_1,
    Q4_K,
    Q8_0,
)
from augserve.engine.quant import QTensor, quantize_int8

DENSE_TYPES = (F32, F16, BF16)
EXACT_INT4 = (Q4_0, Q4_1, Q4_K)
EXACT_INT8 = (Q8_0,)


def _f16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[..., 32 bytes of 64 values] -> [..., 64]: low nibbles first, then high (GGUF)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _q4_0(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d = _f16(blocks[:, :2])
    return _nibbles(blocks[:, 2:]), d, np.zeros_like(d)


def _q4_1(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d, m = _f16(blocks[:, :2]), _f16(blocks[:, 2:4])
    return _nibbles(blocks[:, 4:]), d, m + 8 * d  # q d + m = (q - 8) d + (m + 8 d)


def _q4_k(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from gguf.quants import Q4_K as GQ4K

    nb = blocks.shape[0]
    d, dmin = _f16(blocks[:, :2]), _f16(blocks[:, 2:4])
    sc, mn = GQ4K.get_scale_min(blocks[:, 4:16])
    scale = d * sc.astype(np.float32)  # [nb, 8]: one per 32 values
    low = dmin * mn.astype(np.float32)
    qs = blocks[:, 16:].reshape(nb, 4, 32)  # 64 values per 32 bytes: sub-blocks 2j, 2j + 1
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).reshape(nb, 8, 32)
    return q.reshape(nb, 256), scale, 8 * scale - low


_INT4 = {Q4_0: _q4_0, Q4_1: _q4_1, Q4_K: _q4_k}


def int4_from_gguf(raw: np.ndarray, qtype: int, shape: tuple[int, int]) -> QTensor:
    """A Q4_0 / Q4_1 / Q4_K tensor [N, K] as int4 group 32, exactly."""
    n, k = shape
    blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, BLOCK_BYTES[qtype])
    if blocks.shape[0] * BLOCK_ELEMS[qtype] != n * k:
        raise ValueError(f"GGUF tensor of {blocks.shape[0]} blocks is not of shape {shape}")
    q, scale, zero = _INT4[qtype](blocks)
    return QTensor(
        torch.from_numpy(np.ascontiguousarray(q.reshape(n, k), dtype=np.uint8)),
        torch.from_numpy(np.ascontiguousarray(scale.reshape(n, k // GROUP))),
        torch.from_numpy(np.ascontiguousarray(zero.reshape(n, k // GROUP))),
        GROUP,
        4,
    )


def int8_from_gguf(raw: np.ndarray, shape: tuple[int, int]) -> QTensor:
    """A Q8_0 tensor [N, K] as int8 group 32, exactly."""
    n, k = shape
    blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, BLOCK_BYTES[Q8_0])
    if blocks.shape[0] * GROUP != n * k:
        raise ValueError(f"GGUF tensor of {blocks.shape[0]} blocks is not of shape {shape}")
    q = np.ascontiguousarray(blocks[:, 2:]).view(np.int8).reshape(n, k)
    d = _f16(blocks[:, :2]).reshape(n, k // GROUP)
    return QTensor(torch.from_numpy(q.copy()), torch.from_numpy(d), None, GROUP, 8)


def qtensor_from_gguf(raw: np.ndarray, qtype: int, shape: tuple[int, int]) -> QTensor:
    """Any GGUF tensor [N, K] the `gguf` package dequantizes, in its nearest QTensor form
    (the module doc says which are exact)."""
    if qtype in EXACT_INT4:
        return int4_from_gguf(raw, qtype, shape)
    if qtype in EXACT_INT8:
        return int8_from_gguf(raw, shape)
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    w = dequantize(np.asarray(raw), GGMLQuantizationType(qtype)).astype(np.float32)
    dense = torch.from_numpy(np.ascontiguousarray(w.reshape(shape)))
    if qtype in DENSE_TYPES:
        return QTensor(dense, None, None, 0, 16)
    return quantize_int8(dense)


def form_of(qtype: int) -> str:
    """How a GGUF type is held (for docs and logs)."""
    if qtype in EXACT_INT4:
        return "int4 group 32 (exact)"
    if qtype in EXACT_INT8:
        return "int8 group 32 as two int4 planes (exact)"
    if qtype in DENSE_TYPES:
        return "dense (exact)"
    return "int8 per channel (requantized)"
