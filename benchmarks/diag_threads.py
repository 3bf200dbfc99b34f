"""Diagnostic: where the engine's time goes when the cores are shared (thread settings).

One process per variant (OpenMP reads its environment once), each timing a decode
step of the engine's ModelRunner and of HF's forward, alternated, on the same weights:
wall time and process CPU time per step (CPU time far above wall x busy threads means
spinning), and the number of OpenMP runtimes (libgomp copies) mapped in the process.

    python benchmarks/diag_threads.py --busy 2 --variants default,passive,threads1

Small by default (batch 16, context 128, 8 steps) so it runs on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "active": {"OMP_WAIT_POLICY": "ACTIVE"},
    "spin10k": {"GOMP_SPINCOUNT": "10000"},
    "threads1": {"AUGSERVE_DIAG_THREADS": "1"},
    "nocompile": {"AUGSERVE_COMPILE": "0"},
    "noprepack": {"AUGSERVE_PREPACK": "0"},
}


def child(model_dir: str, batch: int, ctx: int, steps: int, reps: int) -> dict:
    import torch

    from augserve.engine.kv_cache import KVCacheConfig
    from augserve.engine.model_runner import ModelRunner, SeqChunk
    from augserve.engine.runner_config import RunnerConfig
    from augserve.engine.sampling_params import SamplingParams

    threads = int(os.environ.get("AUGSERVE_DIAG_THREADS", "2"))
    torch.set_num_threads(threads)
    kv = KVCacheConfig(block_size=16, num_device_blocks=batch * (ctx + steps + 32) // 16 + 8)
    runner = ModelRunner(RunnerConfig(model_dir, "fp32", "cpu", kv, threads))
    greedy = SamplingParams(temperature=0.0)
    need = (ctx + steps * (reps + 2) + 15) // 16 + 1
    tables = [list(range(i * need, (i + 1) * need)) for i in range(batch)]
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, runner.vocab_size, (batch, ctx), generator=g).tolist()
    runner.execute(
        [SeqChunk(f"s{i}", p, 0, tables[i], True, greedy) for i, p in enumerate(prompts)]
    )
    pos = [ctx]

    def ours() -> None:
        chunks = [SeqChunk(f"s{i}", [5], pos[0], tables[i], True, greedy) for i in range(batch)]
        runner.execute(chunks)
        pos[0] += 1

    from transformers import AutoModelForCausalLM, DynamicCache

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor(prompts)
    with torch.inference_mode():
        cache = DynamicCache()
        hf(ids, past_key_values=cache, use_cache=True)
    tok = torch.full((batch, 1), 5)

    def theirs() -> None:
        with torch.inference_mode():
            hf(tok, past_key_values=cache, use_cache=True)

    for f in (ours, ours, theirs, theirs):  # warm-up (compile)
        f()
    res: dict[str, list[float]] = {"ours_wall": [], "ours_cpu": [], "hf_wall": [], "hf_cpu": []}
    for _ in range(reps):
        for name, f in (("ours", ours), ("hf", theirs)):
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(steps):
                f()
            res[f"{name}_wall"].append((time.perf_counter() - w0) / steps * 1e3)
            res[f"{name}_cpu"].append((time.process_time() - c0) / steps * 1e3)
    maps = Path("/proc/self/maps").read_text().splitlines()
    gomps = sorted({line.split()[-1] for line in maps if "gomp" in line or "libiomp" in line})
    return {
        "threads": threads,
        "ms_per_step": {k: min(v) for k, v in res.items()},
        "openmp_runtimes": gomps,
        "threads_in_process": len(os.listdir("/proc/self/task")),
    }


def child_e2e(model_dir: str, batch: int, ctx: int, steps: int, reps: int) -> dict:
    """LLM.generate (the engine: scheduler, chunked prefill, sampler) against HF
    `generate`, end to end, `batch` prompts of `ctx` tokens -> `steps` new tokens."""
    import torch

    from augserve import LLM, SamplingParams

    threads = int(os.environ.get("AUGSERVE_DIAG_THREADS", "2"))
    torch.set_num_threads(threads)
    llm = LLM(model_dir, dtype="fp32", num_device_blocks=batch * (ctx + steps) // 16 + 64,
              num_threads=threads, enable_prefix_caching=False)  # fmt: skip
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, llm.engine.runner.vocab_size, (batch, ctx), generator=g).tolist()
    sp = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=steps)

    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor(prompts)

    def ours() -> None:
        llm.generate(prompts, sp)

    def theirs() -> None:
        with torch.inference_mode():
            hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                        max_new_tokens=steps, min_new_tokens=steps, pad_token_id=2)  # fmt: skip

    llm.generate(prompts[:2], SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=2))
    res: dict[str, list[float]] = {"ours_wall": [], "ours_cpu": [], "hf_wall": [], "hf_cpu": []}
    for _ in range(reps):
        for name, f in (("ours", ours), ("hf", theirs)):
            w0, c0 = time.perf_counter(), time.process_time()
            f()
            res[f"{name}_wall"].append((time.perf_counter() - w0) * 1e3)
            res[f"{name}_cpu"].append((time.process_time() - c0) * 1e3)
    ms = {k: min(v) for k, v in res.items()}
    tasks = len(os.listdir("/proc/self/task"))
    return {
        "threads": threads,
        "ms_per_step": ms,
        "openmp_runtimes": [],
        "threads_in_process": tasks,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--variants", default="default,passive,threads1")
    p.add_argument("--busy", type=int, default=0, help="busy processes beside it")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--ctx", type=int, default=128)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--model-dir", default=None)
    p.add_argument("--e2e", action="store_true", help="LLM.generate vs HF generate, whole runs")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        fn = child_e2e if a.e2e else child
        print(json.dumps(fn(a.model_dir, a.batch, a.ctx, a.steps, a.reps)))
        return
    from augserve.engine.make_model import make_model

    model_dir = a.model_dir or str(make_model("llama", "100m", Path(tempfile.mkdtemp()) / "m"))
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    try:
        for name in a.variants.split(","):
            env = {**os.environ, **VARIANTS[name]}
            cmd = [sys.executable, __file__, "--child", "--model-dir", model_dir,
                   "--batch", str(a.batch), "--ctx", str(a.ctx), "--steps", str(a.steps),
                   "--reps", str(a.reps), *(["--e2e"] if a.e2e else [])]  # fmt: skip
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(name, "failed:", out.stderr[-2000:])
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            ms = r["ms_per_step"]
            print(
                f"{name:<10} busy={a.busy} ours {ms['ours_wall']:7.1f} ms"
                f" (cpu {ms['ours_cpu']:7.1f})"
                f"  HF {ms['hf_wall']:7.1f} ms (cpu {ms['hf_cpu']:7.1f})"
                f"  ours/HF speed {ms['hf_wall'] / ms['ours_wall']:.2f}x"
                f"  omp={r['openmp_runtimes']} threads={r['threads_in_process']}",
                flush=True,
            )
    finally:
        for b in busy:
            b.kill()


if __name__ == "__main__":
    main()
