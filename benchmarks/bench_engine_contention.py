"""The engine on a shared machine: LLM.generate against HF `generate`, quiet and beside
busy processes, alternated in one run (the same weights, dtype and thread count).

    python benchmarks/bench_engine_contention.py --busy 0,2 --reps 3 \\
        --out docs/data/engine_contention.json

Workload: the 100m preset (random Llama, ~110M parameters), 16 prompts x 512 tokens ->
64 new tokens each, greedy, end to end (prefill included): output tokens / wall
second, best of `--reps`. A busy process is `python -c 'while True: pass'`. Under
`--busy N` both systems run beside the same N busy processes, one after the other,
so they share the cores alike. Thread settings come from the environment (run it
again with `OMP_WAIT_POLICY=PASSIVE`, `TORCHINDUCTOR_CPP_MIN_CHUNK_SIZE=...`, or
`--threads 1` to compare); the JSON records them with the CPU flags.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENV_KEYS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "KMP_BLOCKTIME",
            "TORCHINDUCTOR_CPP_MIN_CHUNK_SIZE", "AUGSERVE_COMPILE", "AUGSERVE_PREPACK")  # fmt: skip


def cpu_flags() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    flags = next(
        (ln.split(":")[1].split() for ln in info.splitlines() if ln.startswith("flags")), []
    )
    model = next((ln.split(":")[1].strip() for ln in info.splitlines() if "model name" in ln), "")
    keep = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_tile")
    return model + "; " + " ".join(f"{f}={'yes' if f in flags else 'no'}" for f in keep)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--busy", default="0,2", help="busy-process counts to run, e.g. 0,2")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model-dir", default=None)
    p.add_argument("--out", default=None)
    a = p.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from augserve import LLM, SamplingParams
    from augserve.engine.make_model import make_model

    torch.set_num_threads(a.threads)
    model_dir = a.model_dir or str(make_model("llama", "100m", Path(tempfile.mkdtemp()) / "m"))
    blocks = a.batch * ((a.prompt + a.new) // 16 + 2) + 16
    # prefix caching off: the repeated prompts would otherwise skip their prefill (HF has no cache)
    llm = LLM(model_dir, dtype="fp32", num_device_blocks=blocks, num_threads=a.threads,
              enable_prefix_caching=False)  # fmt: skip
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, llm.engine.runner.vocab_size, (a.batch, a.prompt), generator=g)
    sp = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=a.new)

    def ours() -> int:
        outs = llm.generate(prompts.tolist(), sp)
        return sum(o.num_generated_tokens for o in outs)

    def theirs() -> int:
        with torch.inference_mode():
            mask = torch.ones_like(prompts)
            n = a.new
            out = hf.generate(prompts, attention_mask=mask, do_sample=False,
                              max_new_tokens=n, min_new_tokens=n, pad_token_id=2)  # fmt: skip
        return int(out.shape[0] * (out.shape[1] - a.prompt))

    small = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=4)
    llm.generate(prompts[:, :64].tolist(), small)  # warm-up: compile, prepack
    llm.generate(prompts.tolist(), small)
    rows: list[dict[str, Any]] = []
    for busy in [int(x) for x in a.busy.split(",")]:
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            time.sleep(1.0 if busy else 0.0)
            best = {"augserve": 0.0, "hf": 0.0}
            for _ in range(a.reps):
                for name, fn in (("augserve", ours), ("hf", theirs)):
                    t0 = time.perf_counter()
                    n = fn()
                    best[name] = max(best[name], n / (time.perf_counter() - t0))
        finally:
            for pr in procs:
                pr.kill()
                pr.wait()
        row = {"busy": busy, "augserve_tok_s": best["augserve"], "hf_tok_s": best["hf"],
               "ratio": best["augserve"] / best["hf"]}  # fmt: skip
        rows.append(row)
        print(f"busy={busy}: augserve {row['augserve_tok_s']:.1f} tok/s, HF "
              f"{row['hf_tok_s']:.1f} tok/s, ratio {row['ratio']:.2f}x", flush=True)  # fmt: skip
    result = {
        "command": " ".join(["python", *sys.argv]),
        "workload": f"{a.batch} x {a.prompt} -> {a.new}, 100m preset, fp32, greedy",
        "threads": a.threads,
        "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ},
        "cpu": cpu_flags(),
        "cores": len(os.sched_getaffinity(0)),
        "load_avg_at_end": os.getloadavg()[0],
        "torch": torch.__version__,
        "rows": rows,
    }
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
