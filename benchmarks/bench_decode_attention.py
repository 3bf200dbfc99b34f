"""The native paged decode attention, its tiles against the plain-C chunk kernel, side by
side in one run, with the memory floor beside them (docs/engine-speed.md, "Decode
attention over long contexts").

Two builds of the same source: `-march=native` (the tiles of `native/attention.c`: 16
tokens at once where the CPU has AVX-512 and the head size is 32, 64 or 128, 8 at once
on AVX2 for head sizes that are multiples of 8) and `-march=native -DAUG_ATTN_PLAIN`
(the plain-C chunk kernel, auto-vectorized: what served q4, and what AVX2 machines ran
until 2026-12-07). Batches of the agent-session workload's long contexts (1,000-1,900
tokens: where q4's served cell spent a third of its engine thread in this kernel) and
shorter ones, in scattered blocks of 32, fp32 and bf16 caches, for the head shapes of
the sessions model (runs/calib/llama-small: 8 heads, 4 KV heads, size 32), SmolLM2
(9 / 3 / 64) and a 0.5B Qwen2 (14 / 2 / 64). The kernels alternate call by call; the
median of `--reps`. The floor: one pass reading the same K and V bytes (torch sum).

    python -P benchmarks/bench_decode_attention.py [--threads 1] [--reps 15] [--out FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import platform
import random
import statistics
import subprocess
import time
from pathlib import Path

import torch

from augserve.engine.native import build

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {"llama-small 8/4/32": (8, 4, 32), "SmolLM2 9/3/64": (9, 3, 64),
          "Qwen2-0.5B 14/2/64": (14, 2, 64)}  # fmt: skip
rng = random.Random(0)
BATCHES = {
    "40 of 1000-1900": [rng.randint(1000, 1900) for _ in range(40)],
    "8 of 1000-1900": [rng.randint(1000, 1900) for _ in range(8)],
    "32 of 100-1000": [rng.randint(100, 1000) for _ in range(32)],
    "8 of 200-400": [rng.randint(200, 400) for _ in range(8)],  # bench_vs_llamacpp's 8
}
KINDS = {"fp32": (torch.float32, 0), "bf16": (torch.bfloat16, 1)}


def case(shape: tuple[int, int, int], lens: list[int], dtype: torch.dtype, bs: int = 32) -> dict:
    heads, kv, d = shape
    g = torch.Generator().manual_seed(0)
    per = [(n + bs - 1) // bs for n in lens]
    total = sum(per)
    perm = torch.randperm(total, generator=g)
    tables = torch.zeros(len(lens), max(per), dtype=torch.int64)
    at = 0
    for i, n in enumerate(per):
        tables[i, :n] = perm[at : at + n]
        at += n
    return {
        "q": torch.randn(len(lens), heads, d, generator=g),
        "k": torch.randn(total, bs, kv, d, generator=g).to(dtype),
        "v": torch.randn(total, bs, kv, d, generator=g).to(dtype),
        "tables": tables, "lens": torch.tensor(lens, dtype=torch.int64), "bs": bs,
    }  # fmt: skip


def call(lib: ctypes.CDLL, c: dict, kind: int, threads: int) -> tuple[float, torch.Tensor]:
    q, k, tables = c["q"], c["k"], c["tables"]
    out = torch.empty_like(q)
    t = time.perf_counter()
    lib.aug_attn_decode(
        q.data_ptr(), k.data_ptr(), c["v"].data_ptr(), kind, tables.data_ptr(),
        tables.shape[1], c["lens"].data_ptr(), out.data_ptr(), q.shape[0], q.shape[1],
        k.shape[2], q.shape[2], c["bs"], q.shape[2] ** -0.5, threads,
    )  # fmt: skip
    return time.perf_counter() - t, out


def floor_s(c: dict, reps: int) -> float:
    used = [(c["k"], c["v"])]  # every block is some sequence's: the floor reads them all
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        for k, v in used:
            k.view(torch.float32).sum()  # the same bytes as float32 (bf16: in pairs)
            v.view(torch.float32).sum()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    libs = {"tiles": build.load_variant(("-march=native",)),
            "plain": build.load_variant(("-march=native", "-DAUG_ATTN_PLAIN"))}  # fmt: skip
    rows = []
    print(f"threads {a.threads}; ms per call (median of {a.reps}); floor = reading K and V once")
    print(f"{'shape':<20}{'batch':<18}{'cache':<6}{'plain':>8}{'tiles':>8}{'speedup':>9}"
          f"{'floor':>8}{'tiles/floor':>12}")  # fmt: skip
    for sname, shape in SHAPES.items():
        for bname, lens in BATCHES.items():
            for kname, (dtype, kind) in KINDS.items():
                c = case(shape, lens, dtype)
                ts: dict[str, list[float]] = {"tiles": [], "plain": []}
                outs = {}
                for _ in range(a.reps + 2):
                    for name, lib in libs.items():
                        t, outs[name] = call(lib, c, kind, a.threads)
                        ts[name].append(t)
                diff = (outs["tiles"] - outs["plain"]).abs().max().item()
                med = {n: statistics.median(v[2:]) for n, v in ts.items()}
                fl = floor_s(c, a.reps)
                row = {"shape": sname, "batch": bname, "cache": kname, "tokens": sum(lens),
                       "plain_ms": med["plain"] * 1e3, "tiles_ms": med["tiles"] * 1e3,
                       "speedup": med["plain"] / med["tiles"], "floor_ms": fl * 1e3,
                       "tiles_over_floor": med["tiles"] / fl, "max_abs_diff": diff}  # fmt: skip
                rows.append(row)
                print(f"{sname:<20}{bname:<18}{kname:<6}{row['plain_ms']:>8.2f}"
                      f"{row['tiles_ms']:>8.2f}{row['speedup']:>8.2f}x{row['floor_ms']:>8.2f}"
                      f"{row['tiles_over_floor']:>11.2f}x", flush=True)  # fmt: skip
    if a.out:
        flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("flags")), "")  # fmt: skip
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=ROOT).stdout.strip()  # fmt: skip
        meta = {"command": "python -P benchmarks/bench_decode_attention.py "
                f"--threads {a.threads} --reps {a.reps}", "commit": commit,
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "load": list(__import__("os").getloadavg()), "cpu": platform.processor(),
                "cpu_flags": flags.split(":", 1)[-1].split(), "threads": a.threads}  # fmt: skip
        a.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
