"""Prefill-sized products on grouped int4 weights, side by side in one run: the dense
product QuantLinear runs today (the weight dequantized into the thread's buffer, then
`F.linear` in bf16 where the CPU has bf16 instructions, else float32), the int16
product (`native.qmatrix.matmul_wide`, gemm16w.c) and the int8 one decode steps use
(`native.qmatrix.matmul`), on a model's projection shapes (docs/engine-quant.md,
"Prefill on AVX2"). The three alternate; median of `--reps`; the ratio dense / wide.

    python benchmarks/bench_prefill_products.py [--threads 2] [--reps 10] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from augserve.engine.cpu_info import cpu_has_bf16
from augserve.engine.native import qmatrix as nq
from augserve.engine.native.build import isa
from augserve.engine.quant import QTensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_native_kernels import alternated  # noqa: E402

SHAPES = {  # (N, K): SmolLM2-135M's gate_up and down, a 0.5B Qwen2's qkv, o, gate_up, down
    "smollm2 gate_up": (3072, 576), "smollm2 down": (576, 1536),
    "0.5b qkv": (1152, 896), "0.5b o": (896, 896), "0.5b gate_up": (9728, 896),
    "0.5b down": (896, 4864),
}  # fmt: skip
ROWS = (24, 64, 128, 512)


def measure(w: nq.NativeMatrix, x: torch.Tensor, reps: int) -> dict[str, float]:
    dtype = torch.bfloat16 if cpu_has_bf16() else torch.float32
    fns: dict[str, Callable[[], object]] = {
        "dense_ms": lambda: F.linear(x.to(dtype), nq.dequantize(w, dtype, reuse=True)),
        "wide_ms": lambda: nq.matmul_wide(x, w),
        "int8_ms": lambda: nq.matmul(x, w),
    }
    return alternated(fns, reps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(0)
    rows = []
    for name, (n, k) in SHAPES.items():
        q = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
        scale = torch.rand(n, k // 32, generator=g).half().float()  # as Q4_0: f16, implied
        w = nq.pack(QTensor(q, scale, torch.zeros(n, k // 32), 32, 4), grouped=True)
        for m in ROWS:
            got = measure(w, torch.randn(m, k, generator=g), a.reps)
            row = {"shape": name, "n": n, "k": k, "rows": m, **got,
                   "dense_over_wide": got["dense_ms"] / got["wide_ms"]}  # fmt: skip
            rows.append(row)
            print({key: round(v, 3) if isinstance(v, float) else v for key, v in row.items()},
                  flush=True)  # fmt: skip
    if a.out:
        Path(a.out).write_text(json.dumps({
            "command": " ".join([sys.executable, *sys.argv]), "threads": a.threads,
            "isa": isa(), "bf16": cpu_has_bf16(), "load": os.getloadavg(), "rows": rows,
        }, indent=1) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
