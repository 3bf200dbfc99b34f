"""Prefill-sized products of int4 weights: dequantize the packed weight, then one dense
matmul (docs/engine-quant.md, "Prefill").

torch's CPU int4 kernel (`_weight_int4pack_mm_for_cpu`) costs in proportion to the rows
it multiplies: fastest at decode sizes, 2.7x slower than a bf16 `F.linear` at 512 rows
(3072 x 576, 1 thread). From `DEQUANT_ROWS` rows on, `QuantLinear` rebuilds the weight
from the packed bytes (~4 ms for 1.8M weights) and runs one dense matmul: 1.75x faster
at 512 rows. The packed layout (`_convert_weight_to_int4pack_for_cpu`, blocks of 64
output rows: byte j of column k holds row j in its low nibble and row 32 + j in its
high one) is torch's internal; `layout_ok` checks it once per process on a probe, and
where it differs (another CPU capability, another torch) the kernel is used throughout.
"""

from __future__ import annotations

import functools

import torch

DEQUANT_ROWS = 256  # below it the int4 kernel wins (dequantizing costs ~ 250 rows of it)
BLOCK_N = 64


def dequantize_packed(packed: torch.Tensor, scales: torch.Tensor, group: int) -> torch.Tensor:
    """[N, K / 2] packed int4 + [K / g, N, 2] scale and zero -> the weight [N, K], in the
    scales' dtype (computed in fp32, rounded once)."""
    n, k = packed.shape[0], packed.shape[1] * 2
    blocks = packed.view(n // BLOCK_N, k, BLOCK_N // 2)
    q = torch.cat([blocks & 15, blocks >> 4], dim=2).transpose(1, 2).reshape(n, k // group, group)
    scale = scales[..., 0].t().unsqueeze(-1).float()
    zero = scales[..., 1].t().unsqueeze(-1).float()
    return ((q.float() - 8) * scale + zero).view(n, k).to(scales.dtype)


@functools.cache
def layout_ok() -> bool:
    """Whether `dequantize_packed` reads this torch's packing right (a probe, once)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randint(0, 16, (2 * BLOCK_N, 64), generator=g, dtype=torch.int32)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    if packed.shape != (2 * BLOCK_N, 32) or packed.dtype != torch.uint8:
        return False
    ones = torch.stack([torch.ones(2, 2 * BLOCK_N), torch.full((2, 2 * BLOCK_N), 8.0)], -1)
    return bool(torch.equal(dequantize_packed(packed, ones, 32), q.float()))


def use_dequantized(rows: int, n: int) -> bool:
    """Whether a product of `rows` rows runs on the dequantized weight (module doc)."""
    return rows >= DEQUANT_ROWS and n % BLOCK_N == 0 and layout_ok()
