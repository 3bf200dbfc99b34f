"""Decode- and prefill-sized GEMMs: torch's `F.linear` against prepacked weights.

The linear layers are most of a decode step on the CPU (docs/engine-speed.md). vLLM's
CPU backend prepacks every projection's weight once for oneDNN; this measures what
that would give here, on the 100m preset's shapes (fp32, best of N, all three in one
run, side by side):

- `F.linear`: what the engine runs today (MKL's sgemm);
- `mkl_packed`: `torch.ops.mkl._mkl_linear` with `_mkl_reorder_linear_weight`;
- `onednn_packed`: `torch.ops.mkldnn._linear_pointwise` with `_reorder_linear_weight`.

    python benchmarks/bench_gemm_prepack.py [--threads 2] [--rows 16,64,4096]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

# (in, out) of the 100m preset's projections: QKV, O, gate+up, down, LM head
SHAPES = ((768, 2304), (768, 768), (768, 6144), (3072, 768), (768, 32000))


def best_of(fn: Callable[[], torch.Tensor], reps: int) -> float:
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def kernels(x: torch.Tensor, w: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    rows = x.shape[0]
    mkl_w = torch.ops.mkl._mkl_reorder_linear_weight(w, rows)
    dnn_w = torch.ops.mkldnn._reorder_linear_weight(w, rows)
    return {
        "F.linear": lambda: F.linear(x, w),
        "mkl_packed": lambda: torch.ops.mkl._mkl_linear(x, mkl_w, w, None, rows),
        "onednn_packed": lambda: torch.ops.mkldnn._linear_pointwise(x, dnn_w, None, "none", [], ""),
    }


def cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    want = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")
    return " ".join(f"{k}={'yes' if k in flags else 'no'}" for k in want)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rows", default="16,64,4096", help="batch rows M (comma-separated)")
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {a.threads} threads, fp32; {cpu_flags()}")
    print("| in x out | M | F.linear ms | mkl_packed ms | onednn_packed ms | onednn / F.linear |")
    print("|---|---|---|---|---|---|")
    for k, n in SHAPES:
        w = torch.randn(n, k)
        for m in (int(r) for r in a.rows.split(",")):
            x = torch.randn(m, k)
            fns = kernels(x, w)
            ref = fns["F.linear"]()
            for name, fn in fns.items():
                if not torch.allclose(fn(), ref, atol=1e-3, rtol=1e-3):
                    raise SystemExit(f"{name} disagrees with F.linear at {k}x{n}, M={m}")
            t = {name: best_of(fn, a.reps if m < 1024 else 3) for name, fn in fns.items()}
            print(f"| {k} x {n} | {m} | {t['F.linear'] * 1e3:.2f} | {t['mkl_packed'] * 1e3:.2f} "
                  f"| {t['onednn_packed'] * 1e3:.2f} "
                  f"| {t['F.linear'] / t['onednn_packed']:.2f}x |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
