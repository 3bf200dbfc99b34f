"""Quantized weights in the native kernels' block formats, and products with them.

`pack(qt)` turns a `quant.QTensor` into a `NativeMatrix` in the row formats of
`native.h`: int4 weights as q4 rows (w = d q + m per block of 32, exact for GGUF's
Q4_0 / Q4_1 / Q4_K), int8 weights as q8 rows (exact for Q8_0, and for int8 per channel
with its scale repeated per block). Groups of 64, 128 or 256 are whole groups of 32
with equal scales, so they pack exactly too. Scales are stored as float16 where that
holds them exactly (GGUF's own fields: Q4_0, Q4_1, Q8_0), else float32 (Q4_K's products
of two scales); offsets only where the format does not imply them (m = -8 d for a
symmetric int4 weight, -128 d for int8): Q4_0 is then 18 bytes a block as in the file,
Q4_1 20, Q8_0 34; batch-1 decode reads these bytes once a token. `matmul` quantizes the
activations to int8 per 32 (as llama.cpp does for its integer dot products) and runs the
kernel on `torch.get_num_threads()` threads.

Where the kernels are built for AVX-512 VNNI or AVX2 and N is a multiple of 16, `pack`
groups the rows by 16 (`FMT_G16`, gemm16.c: the same bytes, laid out so that one
instruction works on 16 rows, or 8 with AVX2): the products of a batched decode step are
then bound by the weight bytes, not by per-output arithmetic. Other builds (AVX-VNNI
without AVX-512, not measured; plain C) keep the row layout (they read both).
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import torch

from augserve.engine.native.build import NativeUnavailable, isa, load
from augserve.engine.qtensor import INT4_OFFSET, QTensor

QK = 32
FMT_Q8, FMT_F16, FMT_M, FMT_G16 = 1, 2, 4, 8  # native.h's format bits
GROUP = 16  # rows of a FMT_G16 group


def packable(qt: QTensor) -> bool:
    """Whether `qt` has a native form: int4 or int8, K and the group multiples of 32."""
    k = qt.shape[1]
    return qt.bits in (4, 8) and k % QK == 0 and qt.group % QK == 0


@dataclass(frozen=True)
class NativeMatrix:
    """A weight [n, k] in rows of blocks: `data` uint8 [n, k / 32 * block bytes]."""

    data: torch.Tensor
    fmt: int  # FMT_* bits
    n: int
    k: int

    def __post_init__(self) -> None:
        if not 0 <= self.fmt < 16:
            raise ValueError(f"fmt must be 0..15 (FMT_* bits), got {self.fmt}")
        if self.fmt & FMT_G16 and self.n % GROUP:
            raise ValueError(f"n must be a multiple of {GROUP} with FMT_G16, got {self.n}")
        if tuple(self.data.shape) != (self.n, self.k // QK * block_bytes(self.fmt)):
            shape = tuple(self.data.shape)
            raise ValueError(f"data shape {shape} does not hold [{self.n}, {self.k}]")

    @property
    def kind(self) -> int:
        """4 or 8: the quants' bits."""
        return 8 if self.fmt & FMT_Q8 else 4

    @property
    def nbytes(self) -> int:
        return self.data.numel()

    @property
    def grouped(self) -> bool:
        """Rows grouped by 16 (FMT_G16)."""
        return bool(self.fmt & FMT_G16)


def block_bytes(fmt: int) -> int:
    scale = 2 if fmt & FMT_F16 else 4
    return scale * (2 if fmt & FMT_M else 1) + (32 if fmt & FMT_Q8 else 16)


def _exact_f16(t: torch.Tensor) -> bool:
    """Whether float16 holds `t` to its float32 rounding (a relative 2^-22)."""
    h = t.half().float()
    return bool(torch.isfinite(h).all()) and bool(((h - t).abs() <= t.abs() * 2**-22).all())


def _per_block(t: torch.Tensor | None, n: int, group: int, nb: int) -> torch.Tensor:
    """[n, k / group] -> [n, k / 32] float32 (each group's value on each of its blocks)."""
    if t is None:
        return torch.zeros(n, nb)
    return t.float().repeat_interleave(group // QK, dim=1).reshape(n, nb)


def grouped_by_default(n: int) -> bool:
    """Whether `pack` groups an `n`-row weight by 16: where the kernels are built for
    AVX-512 VNNI or AVX2 (`aug_isa`), the builds whose grouped product was measured the
    faster one (docs/engine-quant.md, "On an AVX2-only machine")."""
    if n % GROUP:
        return False
    try:
        return isa() in ("avx512-vnni", "avx2")
    except NativeUnavailable:  # no kernels: the row layout, which nothing reads
        return False


def pack(qt: QTensor, grouped: bool | None = None) -> NativeMatrix:
    """`qt` in block form (see the module doc); ValueError if not `packable`, or if
    `grouped` and N is not a multiple of 16. `grouped` None: `grouped_by_default`."""
    if not packable(qt):
        raise ValueError(f"no native form for bits={qt.bits}, group={qt.group}, K={qt.shape[1]}")
    assert qt.scale is not None
    n, k = qt.shape
    nb = k // QK
    d = _per_block(qt.scale, n, qt.group, nb)
    m = _per_block(qt.zero, n, qt.group, nb)
    implied = INT4_OFFSET if qt.bits == 4 else 128
    m = m - implied * d  # (q - 8) s + z = s q + (z - 8 s); q s + z = (q + 128) s + (z - 128 s)
    if qt.bits == 4:
        q = qt.q.to(torch.uint8).view(n, nb, QK)
        body = q[..., :16] | (q[..., 16:] << 4)
    else:
        body = (qt.q.to(torch.int16) + 128).to(torch.uint8)  # unsigned
    fmt = FMT_Q8 if qt.bits == 8 else 0
    parts = [d]
    if qt.zero is not None and not torch.equal(m, -implied * d):
        fmt |= FMT_M
        parts.append(m)
    if all(_exact_f16(t) for t in parts):
        fmt |= FMT_F16
        parts = [t.half() for t in parts]
    if grouped is None:
        grouped = grouped_by_default(n)
    if grouped:
        if n % GROUP:
            raise ValueError(f"grouped packing needs N a multiple of {GROUP}, got {n}")
        return NativeMatrix(_grouped(parts, body, n, nb), fmt | FMT_G16, n, k)
    scales = [t.contiguous().view(torch.uint8) for t in parts]
    data = torch.cat([*scales, body.reshape(n, -1)], dim=1).contiguous()
    return NativeMatrix(data, fmt, n, k)


def _grouped(parts: list[torch.Tensor], body: torch.Tensor, n: int, nb: int) -> torch.Tensor:
    """native.h's FMT_G16 layout: per group of 16 rows, the scales (and offsets) block by
    block, then the quants 16 rows x 4 bytes at a time; [n, row bytes] uint8."""
    g = n // GROUP
    # [n, nb] scales -> [g, nb, 16] (each as its bytes)
    scales = [
        t.contiguous().reshape(g, GROUP, nb).transpose(1, 2).contiguous().view(torch.uint8)
        for t in parts
    ]
    words = body.reshape(g, GROUP, nb, -1, 4)  # q4: 4 words of 4 bytes a block; q8: 8
    quants = words.permute(0, 2, 3, 1, 4).contiguous()  # [g, nb, word, 16 rows, 4]
    out = torch.cat([*(s.reshape(g, -1) for s in scales), quants.reshape(g, -1)], dim=1)
    return out.reshape(n, -1).contiguous()


def _lib() -> ctypes.CDLL:
    return load()


def quantize_activations(x: torch.Tensor) -> torch.Tensor:
    """x float32 [M, K] (contiguous) -> its int8 form (native.h's activations), uint8."""
    m, k = x.shape
    lib = _lib()
    out = torch.empty(int(lib.aug_acts_bytes(m, k)), dtype=torch.uint8)
    lib.aug_quantize_rows(x.data_ptr(), m, k, k, out.data_ptr())
    return out


def matmul(x: torch.Tensor, w: NativeMatrix, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, k] (any float dtype) -> float32 [M, n] = x w^T (+ bias, float32 [n])."""
    if x.shape[-1] != w.k:
        raise ValueError(f"x has {x.shape[-1]} columns, the weight {w.k}")
    x32 = x if x.dtype == torch.float32 and x.is_contiguous() else x.float().contiguous()
    rows = x32.shape[0]
    xa = quantize_activations(x32)
    y = torch.empty(rows, w.n, dtype=torch.float32)
    bp = None if bias is None else bias.data_ptr()
    _lib().aug_gemm(w.data.data_ptr(), w.fmt, xa.data_ptr(), y.data_ptr(), rows, w.n, w.k,
                    w.n, bp, torch.get_num_threads())  # fmt: skip
    return y


def wide_by_default() -> bool:
    """Whether prefill-sized products on grouped weights run `matmul_wide` (int16
    activations) rather than a dense product on the dequantized weight: on AVX2 builds,
    where the dense product is float32 (docs/engine-quant.md, "Prefill on AVX2")."""
    try:
        return isa() == "avx2"
    except NativeUnavailable:
        return False


def matmul_wide(x: torch.Tensor, w: NativeMatrix, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, k] (any float dtype) -> float32 [M, n] = x w^T (+ bias), the activations
    quantized to int16 per block of 32 (gemm16w.c); `w` grouped by 16 (ValueError if not)."""
    if not w.grouped:
        raise ValueError("matmul_wide needs a weight grouped by 16 (FMT_G16)")
    if x.shape[-1] != w.k:
        raise ValueError(f"x has {x.shape[-1]} columns, the weight {w.k}")
    x32 = x if x.dtype == torch.float32 and x.is_contiguous() else x.float().contiguous()
    m = x32.shape[0]
    lib = _lib()
    work = _scratch_bytes("work", int(lib.aug_acts16_bytes(m, w.k)))
    y = torch.empty(m, w.n, dtype=torch.float32)
    bp = None if bias is None else bias.data_ptr()
    lib.aug_gemm16_wide(w.data.data_ptr(), w.fmt, x32.data_ptr(), work.data_ptr(), y.data_ptr(),
                        m, w.n, w.k, w.n, bp, torch.get_num_threads())  # fmt: skip
    return y


def rows(w: NativeMatrix, ids: torch.Tensor) -> torch.Tensor:
    """Rows `ids` of the weight, float32 [len(ids), k], each value as GGUF's reference
    dequantization computes it (`aug_rows`); IndexError for an id outside [0, n)."""
    flat = ids.reshape(-1).to(torch.int64).contiguous()
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) >= w.n):
        raise IndexError(f"row ids must be in [0, {w.n})")
    out = torch.empty(flat.numel(), w.k, dtype=torch.float32)
    _lib().aug_rows(w.data.data_ptr(), w.fmt, w.n, w.k, flat.data_ptr(), flat.numel(),
                    out.data_ptr())  # fmt: skip
    return out


# A dequantized weight is written into a per-thread buffer kept between calls (up to
# SCRATCH_BYTES): with the server's fixed 1 MiB mmap threshold (native_memory.py) a fresh
# buffer is fresh pages the kernel must fault in and zero, 0.34 s of a 512-token prefill
# of a 0.5B model (1.05 s against 0.71 s, the same step with and without the tuning).
SCRATCH_BYTES = 64 * 2**20
_scratch = threading.local()


def _scratch_bytes(name: str, size: int) -> torch.Tensor:
    """`size` bytes of this thread's buffer `name` (kept between calls up to
    SCRATCH_BYTES; larger ones are fresh)."""
    if size > SCRATCH_BYTES:
        return torch.empty(size, dtype=torch.uint8)
    buf: torch.Tensor | None = getattr(_scratch, name, None)
    if buf is None or buf.numel() < size:
        buf = torch.empty(max(size, 2**20), dtype=torch.uint8)
        setattr(_scratch, name, buf)
    return buf[:size]


def _buffer(n: int, k: int, dtype: torch.dtype, reuse: bool) -> torch.Tensor:
    size = n * k * torch.empty((), dtype=dtype).element_size()
    if not reuse:
        return torch.empty(n, k, dtype=dtype)
    return _scratch_bytes("buf", size).view(dtype).view(n, k)


def dequantize(
    w: NativeMatrix, dtype: torch.dtype = torch.float32, reuse: bool = False
) -> torch.Tensor:
    """The weight [n, k] in float32 or bfloat16 (what prefill-sized products multiply).
    `reuse`: in this thread's buffer, valid until its next `reuse` call."""
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"dtype must be float32 or bfloat16, got {dtype}")
    out = _buffer(w.n, w.k, dtype, reuse)
    kind = 0 if dtype == torch.float32 else 1
    _lib().aug_dequant(w.data.data_ptr(), w.fmt, w.n, w.k, out.data_ptr(), kind,
                       torch.get_num_threads())  # fmt: skip
    return out
