"""The engine on a real trained model, SmolLM2-135M-Instruct (its Q4_1 GGUF, dequantized
to fp32 at load), against Hugging Face `generate` on the same file, in one run.

Workloads (random prompt ids, greedy, no EOS stop):
- decode at batch 1 and batch 8 (prompt --prompt tokens, --steps decode steps):
  decode tokens/s, measured from the first to the last token;
- BATCHxPROMPT->NEW (default 16x512->64): whole requests, prefill included, as
  generated tokens/s from the start to the last token.

The two systems alternate, best of --reps; ratio = ours / HF. Writes JSON and CSV
(`--out`, default docs/engine-smollm2.{json,csv}) with the command, the CPU flags and
torch's thread count. Full run on a quiet machine:

    flock /tmp/augserve-cpu.lock .venv/bin/python benchmarks/bench_smollm2_vs_hf.py --threads 2

`--model` takes anything `--model` takes (FILE.gguf, smollm2, a directory); HF loads
the same GGUF (`from_pretrained(dir, gguf_file=...)`, needs `accelerate`).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "vs_vllm"))
import bench_engine_throughput as bet  # noqa: E402
from common import cpu_flags  # noqa: E402

from augserve.engine.kv_cache import KVCacheConfig  # noqa: E402
from augserve.engine.model_runner import ModelRunner  # noqa: E402
from augserve.engine.resolve import gguf_source, resolve_model  # noqa: E402
from augserve.engine.runner_config import RunnerConfig  # noqa: E402


def load_hf(model_dir: str) -> Any:
    from transformers import AutoModelForCausalLM

    src = gguf_source(model_dir)
    if src is None:
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    path = Path(src["path"])
    return AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).eval()


def whole_requests(runner: ModelRunner, hf: Any, spec: str, reps: int) -> tuple[float, float]:
    """(ours, HF) generated tokens/s for BATCHxPROMPT->NEW, prefill included."""
    shape, new = spec.split("->")
    batch, length = (int(x) for x in shape.split("x"))
    prompts = bet._prompts(batch, length, runner.vocab_size)
    gens = [
        lambda n: bet.ours_generate(runner, prompts, n),
        lambda n: bet.hf_generate(hf, prompts, n),
    ]
    for g in gens:
        g(2)  # warm-up
    best = [0.0, 0.0]
    for _ in range(reps):
        for k, g in enumerate(gens):
            st = g(int(new))
            best[k] = max(best[k], batch * int(new) / (st[-1] - st[0]))
    return best[0], best[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="smollm2", help="FILE.gguf, smollm2 or a model dir")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batches", default="1,8", help="decode batch sizes")
    p.add_argument("--prompt", type=int, default=64, help="prompt length of the decode runs")
    p.add_argument("--steps", type=int, default=32, help="decode steps measured")
    p.add_argument("--requests", default="16x512->64", help="BATCHxPROMPT->NEW ('' skips)")
    p.add_argument("--reps", type=int, default=3, help="repeats; the best is kept")
    p.add_argument("--no-compile", action="store_true", help="the engine's eager path")
    p.add_argument(
        "--out", type=Path, default=Path("docs/engine-smollm2"), help="stem: .json, .csv"
    )
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    model_dir = resolve_model(a.model)
    kv = KVCacheConfig(block_size=16, num_device_blocks=1024)
    cfg = RunnerConfig(model_dir, "fp32", "cpu", kv, a.threads, compile=not a.no_compile)
    runner, hf = ModelRunner(cfg), load_hf(model_dir)
    print(f"model {a.model} ({model_dir}) fp32 threads={a.threads} compiled={runner.compiled}")
    rows: list[dict[str, Any]] = []

    def row(workload: str, ours: float, theirs: float) -> None:
        rows.append({"workload": workload, "ours_tok_s": round(ours, 1),
                     "hf_tok_s": round(theirs, 1), "ratio": round(ours / theirs, 3)})  # fmt: skip
        print(f"{workload:<34}{ours:>10.1f}{theirs:>10.1f}{ours / theirs:>8.2f}", flush=True)

    print(f"{'workload':<34}{'ours':>10}{'HF':>10}{'ratio':>8}  (tokens/s)")
    for b in (int(x) for x in a.batches.split(",") if x):
        (o, h), _ = bet.measure(runner, hf, b, a.prompt, a.steps, a.reps)
        row(f"decode batch {b} (prompt {a.prompt})", o, h)
    if a.requests:
        row(
            f"requests {a.requests} (with prefill)", *whole_requests(runner, hf, a.requests, a.reps)
        )
    result = {
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "model": a.model,
        "dtype": "fp32",
        "threads": a.threads,
        "compiled": runner.compiled,
        "torch": torch.__version__,
        "cpu": cpu_flags(),
        "rows": rows,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    with a.out.with_suffix(".csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {a.out.with_suffix('.json')} and {a.out.with_suffix('.csv')}")


if __name__ == "__main__":
    main()
