"""The native integer kernels against torch's int4 kernel and against dequantize + one dense
bf16 matmul, side by side in one run, on a model's projection shapes (docs/engine-quant.md,
"Native kernels").

For each shape [N, K] (random int4 weights in groups of 32) and row count M: the native
products (`native.qmatrix.matmul`: int8 activations, integer dot products) on the weight
in rows (`native_rows_ms`) and grouped by 16 rows (`native_g16_ms`, gemm16.c),
`torch.ops.aten._weight_int4pack_mm_for_cpu` on bf16 activations (what the quantized path
ran before), and `F.linear` in bf16 on the weight dequantized by the native kernel for
this call (what a prefill-sized product runs); the three alternated, median of `--reps`.
The crossover sets `quant.NATIVE_DENSE_ROWS`.

    python benchmarks/bench_native_kernels.py [--threads 2] [--reps 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from augserve.engine.native import qmatrix as nq
from augserve.engine.native.build import isa
from augserve.engine.quant import QTensor

SHAPES = {  # (N, K): SmolLM2-135M's gate_up and down, a 0.5B Qwen2's qkv, gate_up, down
    "smollm2 gate_up": (3072, 576), "smollm2 down": (576, 1536),
    "0.5b qkv": (1152, 896), "0.5b gate_up": (9728, 896), "0.5b down": (896, 4864),
}  # fmt: skip
ROWS = (1, 8, 16, 32, 64, 128, 256)


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(
    w: nq.NativeMatrix, g16: nq.NativeMatrix, packed: torch.Tensor, sz: torch.Tensor,
    x: torch.Tensor, reps: int,
) -> dict[str, float]:  # fmt: skip
    """Median ms of the four products of x, alternated."""
    xb = x.bfloat16()
    fns: dict[str, Callable[[], object]] = {
        "native_rows_ms": lambda: nq.matmul(x, w),
        "native_g16_ms": lambda: nq.matmul(x, g16),
        "torch_int4_ms": lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(xb, packed, 32, sz),
        "dequant_bf16_ms": lambda: F.linear(xb, nq.dequantize(w, torch.bfloat16)),
    }
    return alternated(fns, reps)


def alternated(fns: dict[str, Callable[[], object]], reps: int) -> dict[str, float]:
    """Each function once to warm up, then all in turn `reps` times: median ms of each."""
    times: dict[str, list[float]] = {key: [] for key in fns}
    for fn in fns.values():
        fn()
    for _ in range(reps):
        for key, fn in fns.items():
            times[key].append(timed(fn))
    return {key: 1e3 * statistics.median(v) for key, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    rows = []
    for name, (n, k) in SHAPES.items():
        q = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
        qt = QTensor(q, torch.rand(n, k // 32, generator=g), torch.zeros(n, k // 32), 32, 4)
        w, g16 = nq.pack(qt, grouped=False), nq.pack(qt, grouped=True)
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.to(torch.int32), 1)
        sz = torch.stack([qt.scale.t(), qt.zero.t()], -1).to(torch.bfloat16).contiguous()  # type: ignore[union-attr]
        for m in ROWS:
            x = torch.randn(m, k, generator=g)
            got = measure(w, g16, packed, sz, x, a.reps)
            row = {"shape": name, "n": n, "k": k, "rows": m, **got}
            rows.append(row)
            print(row, flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps({
            "command": " ".join([sys.executable, *sys.argv]), "threads": a.threads,
            "isa": isa(), "load": os.getloadavg(), "rows": rows,
        }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
