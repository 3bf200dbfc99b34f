"""Weight-only quantized CPU kernels against the engine's bf16 / fp32 linear layers.

One "pass" multiplies M activation rows by every projection of every decoder layer
of a model's shapes (QKV, O, gate+up, down; no LM head), the weights of all layers
held at once, so they are read from DRAM as in a decode step, not from cache. Each
kernel is timed best of N in one run, side by side; the ratios are what counts (the
machine may be shared: the load average is recorded).

Kernels (torch's own, `torch.ops.aten`):
- `fp32_linear` (F.linear, MKL), `fp32_onednn` (prepacked, the engine's fp32 path),
  `bf16_linear` (F.linear in bf16, the engine's default);
- `int8_ch_{bf16,fp32}`: `_weight_int8pack_mm`, int8 per output channel;
- `int4_g{32,64}_{bf16,fp32}`: `_weight_int4pack_mm_for_cpu` on
  `_convert_weight_to_int4pack_for_cpu`, group 32 / 64 with scale and zero;
- `dyn4_g32_fp32`: `_dyn_quant_matmul_4bit` (activations quantized on the fly).

    python benchmarks/bench_quant_kernels.py [--threads 2] [--reps 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from augserve.bench.report import git_commit, write_json

# name: (hidden, intermediate, qkv out, layers)
MODELS = {
    "smollm2-135m": (576, 1536, 960, 30),
    "qwen2.5-0.5b": (896, 4864, 1152, 24),
}
Kernel = Callable[[torch.Tensor], None]


def layer_shapes(hidden: int, inter: int, qkv: int) -> list[tuple[int, int]]:
    """(out, in) of one decoder layer's projections."""
    return [(qkv, hidden), (hidden, hidden), (2 * inter, hidden), (hidden, inter)]


def _int4(w: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric int4 of w [N, K] per group of K: packed weight, scale-and-zero [K/g, N, 2]."""
    n, k = w.shape
    g = w.reshape(n, k // group, group)
    lo, hi = g.amin(-1), g.amax(-1)
    scale = ((hi - lo) / 15).clamp_min(1e-8)
    q = ((g - lo[..., None]) / scale[..., None]).round().clamp(0, 15).to(torch.int32)
    zero = lo + 8 * scale  # (q - 8) * scale + zero = q * scale + lo
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.reshape(n, k), 1)
    return packed, torch.stack([scale.T, zero.T], -1).contiguous()


def _int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (w.abs().amax(1) / 127).clamp_min(1e-8)
    return (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8), scale


def _dyn4(w: torch.Tensor, group: int) -> torch.Tensor:
    n, k = w.shape
    g = w.reshape(n, k // group, group)
    scale = (g.abs().amax(-1) / 7).clamp_min(1e-8)
    q = ((g / scale[..., None]).round().clamp(-8, 7) + 8).to(torch.uint8).reshape(n, k)
    packed = (q[:, 1::2] << 4 | q[:, ::2]).contiguous()
    return torch.ops.aten._dyn_quant_pack_4bit_weight(packed, scale, None, group, k, n)


def build(kind: str, w: torch.Tensor) -> Kernel:
    """x -> x @ w.T with kernel `kind` (its weight prepared once, here)."""
    if kind == "fp32_linear":
        return lambda x: F.linear(x, w)
    if kind == "fp32_onednn":
        p = torch.ops.mkldnn._reorder_linear_weight(w, 32)
        return lambda x: torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], "")
    if kind == "bf16_linear":
        wb = w.bfloat16()
        return lambda x: F.linear(x.bfloat16(), wb)
    act = torch.bfloat16 if kind.endswith("bf16") else torch.float32
    if kind.startswith("int8_ch"):
        q, s = _int8(w)
        sa = s.to(act)
        return lambda x: torch.ops.aten._weight_int8pack_mm(x.to(act), q, sa)
    if kind.startswith("int4_g"):
        group = int(kind.split("_")[1][1:])
        p4, sz = _int4(w, group)
        sza = sz.to(act)
        return lambda x: torch.ops.aten._weight_int4pack_mm_for_cpu(x.to(act), p4, group, sza)
    if kind == "dyn4_g32_fp32":
        d4, (n, k) = _dyn4(w, 32), w.shape
        return lambda x: torch.ops.aten._dyn_quant_matmul_4bit(x, d4, 32, k, n)
    raise ValueError(f"unknown kernel {kind!r}")


KERNELS = (
    "fp32_linear", "fp32_onednn", "bf16_linear", "int8_ch_bf16", "int8_ch_fp32",
    "int4_g32_bf16", "int4_g64_bf16", "int4_g32_fp32", "dyn4_g32_fp32",
)  # fmt: skip
BYTES_PER_WEIGHT = {
    "fp32": 4.0,
    "bf16": 2.0,
    "int8": 1.0,
    "int4": 0.5 + 8 / 32,
    "dyn4": 0.5 + 4 / 32,
}


def best_of(fns: list[Kernel], xs: list[torch.Tensor], reps: int) -> float:
    """Best wall time of one pass: every weight's kernel on its own input."""
    best = float("inf")
    for _ in range(max(reps, 1)):
        t0 = time.perf_counter()
        for fn, x in zip(fns, xs, strict=True):
            fn(x)
        best = min(best, time.perf_counter() - t0)
    return best


def cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(line for line in f if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return "unknown"
    want = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile")
    return " ".join(f"{k}={'yes' if k in flags else 'no'}" for k in want)


def run_model(name: str, reps: int, rows: list[int], kinds: list[str]) -> list[dict[str, object]]:
    """Every kernel on one model's shapes, alternated round by round (best of `reps`), so
    that a load change on a shared machine hits all of them alike."""
    hidden, inter, qkv, layers = MODELS[name]
    gen = torch.Generator().manual_seed(0)
    shapes = layer_shapes(hidden, inter, qkv) * layers
    n_weights = sum(o * i for o, i in shapes)
    weights = [torch.randn(o, i, generator=gen) / i**0.5 for o, i in shapes]
    fns = {kind: [build(kind, w) for w in weights] for kind in kinds}
    del weights
    xs = {m: [torch.randn(m, i, generator=gen) for _, i in shapes] for m in rows}
    best = {(k, m): float("inf") for k in kinds for m in rows}
    for _ in range(reps):
        for m in rows:
            for kind in kinds:
                best[kind, m] = min(best[kind, m], best_of(fns[kind], xs[m], 0))
    out: list[dict[str, object]] = []
    for (kind, m), t in best.items():
        gbs = n_weights * BYTES_PER_WEIGHT[kind.split("_")[0]] / t / 1e9
        out.append({"model": name, "kernel": kind, "M": m, "ms": round(t * 1e3, 3),
                    "weight_GBps": round(gbs, 2)})  # fmt: skip
        print(f"{name:14s} {kind:15s} M={m:<3d} {t * 1e3:9.2f} ms  {gbs:6.2f} GB/s", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rows", default="1,8")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--kernels", default=",".join(KERNELS))
    p.add_argument("--out", default="docs/data/quant-kernels.json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rows = [int(r) for r in a.rows.split(",")]
    load0 = os.getloadavg()
    results = []
    with torch.no_grad():
        for name in a.models.split(","):
            results += run_model(name, a.reps, rows, a.kernels.split(","))
    write_json(
        a.out, results,
        command="python benchmarks/bench_quant_kernels.py " + " ".join(sys.argv[1:]),
        commit=git_commit(), date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        loadavg_before=load0, loadavg_after=os.getloadavg(), threads=a.threads,
        torch=torch.__version__, cpu_capability=torch.backends.cpu.get_cpu_capability(),
        cpu_flags=cpu_flags(),
    )  # fmt: skip
    print(f"wrote {a.out} (load {load0[0]:.1f} -> {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
