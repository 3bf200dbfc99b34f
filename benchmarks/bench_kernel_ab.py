"""A kernel change against the kernels of another revision, side by side in one process.

Builds the native library from `--base`'s sources (`git show REV:augserve/engine/native/
...`, the same compiler and flags as `native.build`) beside the working tree's, and runs
the int8-activation product (`aug_gemm`, what decode steps run; `--product prefill`: the
int16-activation product `aug_gemm16_wide`, what a prefill runs on AVX2) of both on one
step's worth of weights: every projection of a model (`--model`: the 0.5B Qwen2 shape of
bench_vs_llamacpp.py, or SmolLM2-135M's), random int4 weights grouped by 16 rows, all
layers, so that the weights stream from memory as in a real step. Per row count: the two
libraries alternate, median of `--reps` steps; the outputs must be bit-identical (the
change is a different order of exact integer sums, or this benchmark says so).

    python benchmarks/bench_kernel_ab.py --base HEAD [--rows 1 8] [--reps 15] [--out FILE]
    python benchmarks/bench_kernel_ab.py --base HEAD --product prefill --rows 48 512 --reps 5
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from augserve.engine.native import build
from augserve.engine.native import qmatrix as nq
from augserve.engine.quant import QTensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_native_kernels import alternated  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODELS = {  # per layer (N, K) of qkv, o, gate_up, down; layers
    "qwen2-0.5b": ([(1152, 896), (896, 896), (9728, 896), (896, 4864)], 24),
    "smollm2-135m": ([(960, 576), (576, 576), (3072, 576), (576, 1536)], 30),
}


def base_library(rev: str, cc: str) -> ctypes.CDLL:
    """The native library built from `rev`'s sources (into a temporary directory)."""
    tmp = Path(tempfile.mkdtemp(prefix="augserve-ab-"))
    for name in build.SOURCES + build.HEADERS:
        src = subprocess.run(["git", "show", f"{rev}:augserve/engine/native/{name}"],
                             cwd=ROOT, capture_output=True, check=True).stdout  # fmt: skip
        (tmp / name).write_bytes(src)
    out = tmp / "base.so"
    cmd = [cc, *build.FLAGS, *build.arch_flags(), "-o", str(out),
           *(str(tmp / n) for n in build.SOURCES), "-lm"]  # fmt: skip
    subprocess.run(cmd, check=True)
    lib = ctypes.CDLL(str(out))
    build.declare(lib)
    return lib


def commit_of(rev: str) -> str:
    """The short commit `rev` names now (a result file keeps what HEAD was)."""
    out = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True,
                         text=True, check=True)  # fmt: skip
    return out.stdout.strip()


def weights(model: str, seed: int = 0) -> list[nq.NativeMatrix]:
    shapes, layers = MODELS[model]
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(layers):
        for n, k in shapes:
            q = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
            scale = torch.rand(n, k // 32, generator=g) * 0.05 + 0.001
            qt = QTensor(q, scale.half().float(), torch.zeros(n, k // 32), 32, 4)
            out.append(nq.pack(qt, grouped=True))
    return out


def step(lib: ctypes.CDLL, ws: list[nq.NativeMatrix], xs: dict[int, torch.Tensor],
         ys: list[torch.Tensor], m: int, threads: int) -> None:  # fmt: skip
    """Every product of one decode step of `m` rows (activations quantized once a K)."""
    for w, y in zip(ws, ys, strict=True):
        xa = xs[w.k]
        lib.aug_gemm(w.data.data_ptr(), w.fmt, xa.data_ptr(), y.data_ptr(), m, w.n, w.k, w.n,
                     None, threads)  # fmt: skip


def prefill_step(lib: ctypes.CDLL, ws: list[nq.NativeMatrix], xs: dict[int, torch.Tensor],
                 ys: list[torch.Tensor], m: int, threads: int) -> None:  # fmt: skip
    """Every product of one prefill chunk of `m` rows (float32 activations, int16 inside)."""
    for w, y in zip(ws, ys, strict=True):
        x, work = xs[w.k], xs[-w.k]
        lib.aug_gemm16_wide(w.data.data_ptr(), w.fmt, x.data_ptr(), work.data_ptr(),
                            y.data_ptr(), m, w.n, w.k, w.n, None, threads)  # fmt: skip


def inputs(lib: ctypes.CDLL, ks: set[int], m: int, product: str) -> dict[int, torch.Tensor]:
    """Per K the activations the product reads (prefill: float32 at K, scratch at -K)."""
    xs = {}
    for k in ks:
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(k))
        if product == "prefill":
            xs[k] = x
            xs[-k] = torch.empty(int(lib.aug_acts16_bytes(m, k)), dtype=torch.uint8)
        else:
            xs[k] = torch.empty(int(lib.aug_acts_bytes(m, k)), dtype=torch.uint8)
            lib.aug_quantize_rows(x.data_ptr(), m, k, k, xs[k].data_ptr())
    return xs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision whose kernels are the baseline")
    ap.add_argument("--model", choices=sorted(MODELS), default="qwen2-0.5b")
    ap.add_argument("--product", choices=("decode", "prefill"), default="decode")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    load = os.getloadavg()[0]
    cc = build.compiler()
    if cc is None:
        raise SystemExit("no C compiler")
    libs = {"base": base_library(a.base, cc), "new": build.load()}
    ws = weights(a.model)
    rows = []
    for m in a.rows:
        xs = inputs(libs["new"], {w.k for w in ws}, m, a.product)
        outs = {key: [torch.empty(m, w.n) for w in ws] for key in libs}
        run = prefill_step if a.product == "prefill" else step
        fns = {key: functools.partial(run, lib, ws, xs, outs[key], m, a.threads)
               for key, lib in libs.items()}  # fmt: skip
        ms = alternated(fns, a.reps)
        same = all(torch.equal(p, q) for p, q in zip(outs["base"], outs["new"], strict=True))
        row = {"rows": m, "base_ms": ms["base"], "new_ms": ms["new"],
               "base_over_new": ms["base"] / ms["new"], "bit_identical": same}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta = {"command": " ".join(sys.argv), "base": a.base, "base_commit": commit_of(a.base),
            "model": a.model,
            "product": a.product,
            "isa": build.isa(), "threads": a.threads, "reps": a.reps,
            "load_before": load}  # fmt: skip
    if a.out:
        Path(a.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
