"""augserve and Hugging Face workers for bench_vs_vllm.py; run in the project's venv.

.venv/bin/python worker_augserve.py --engine augserve --model DIR --threads 2
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import WORKLOADS, measure, serve_requests  # noqa: E402


def augserve_generator(a: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    import augserve
    from augserve import LLM, SamplingParams

    llm = LLM(
        a.model,
        policy="vllm",
        dtype="fp32",
        kv_cache_memory=a.kv_gib << 30,
        block_size=a.block_size,
        num_threads=a.threads,
        max_batch_tokens=a.max_batch_tokens,
        # "on" as first measured against vLLM; "auto" is the engine's default (off on CPU)
        compile={"on": True, "off": False, "auto": None}[a.compile],
    )

    def generate(prompts: list[list[int]], n: int) -> list[list[int]]:
        sp = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        return [list(o.token_ids) for o in llm.generate(prompts, sp)]

    runner = llm.engine.runner
    info = {
        "engine": "augserve",
        "version": augserve.__version__,
        "max_num_batched_tokens": a.max_batch_tokens,
        "block_size": a.block_size,
        "attention": getattr(runner, "attention_backend", "?"),
        "prepacked_linears": getattr(runner, "prepacked", "?"),
        "vocab": runner.vocab_size,
    }
    return generate, info


def hf_generator(a: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(a.threads)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()

    def generate(prompts: list[list[int]], n: int) -> list[list[int]]:
        ids = torch.tensor(prompts)
        with torch.inference_mode():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=n,
                min_new_tokens=n,
                pad_token_id=2,
            )
        return out[:, ids.shape[1] :].tolist()

    info = {"engine": "hf", "version": transformers.__version__, "vocab": model.config.vocab_size}
    return generate, info


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--engine", choices=("augserve", "hf"), required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-batch-tokens", type=int, default=4096)
    p.add_argument("--kv-gib", type=int, default=2)
    p.add_argument("--compile", choices=("on", "off", "auto"), default="on")
    a = p.parse_args()
    generate, info = (augserve_generator if a.engine == "augserve" else hf_generator)(a)
    for batch, length in ((2, 16), (1, 40), (3, 300)):  # warm-up (and any compilation)
        generate([[5 + i] * length for i in range(batch)], 4)
    vocab = info.pop("vocab")

    def run(req: dict[str, Any]) -> dict[str, Any]:
        return measure(generate, WORKLOADS[req["workload"]], vocab, req.get("max_tokens"))

    serve_requests(run, info)


if __name__ == "__main__":
    main()
