"""vLLM worker for bench_vs_vllm.py; runs in vLLM's own virtual environment.

VLLM_CPU_KVCACHE_SPACE=2 ... .venv-vllm/bin/python worker_vllm.py --model DIR --mode eager
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import WORKLOADS, measure, serve_requests  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--mode", choices=("eager", "compiled"), default="eager")
    p.add_argument("--max-model-len", type=int, default=1024)
    a = p.parse_args()

    import vllm
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(
        model=a.model,
        dtype="float32",
        enforce_eager=a.mode == "eager",
        enable_prefix_caching=False,
        max_model_len=a.max_model_len,
        seed=0,
    )
    vocab = llm.llm_engine.model_config.get_vocab_size()
    sched = llm.llm_engine.vllm_config.scheduler_config
    cache = llm.llm_engine.vllm_config.cache_config

    def generate(prompts: list[list[int]], n: int) -> list[list[int]]:
        sp = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    for batch, length in ((2, 16), (1, 40), (3, 300)):  # warm-up
        generate([[5 + i] * length for i in range(batch)], 4)

    def run(req: dict[str, Any]) -> dict[str, Any]:
        return measure(generate, WORKLOADS[req["workload"]], vocab, req.get("max_tokens"))

    info = {
        "engine": f"vllm-{a.mode}",
        "version": vllm.__version__,
        "max_num_batched_tokens": sched.max_num_batched_tokens,
        "block_size": cache.block_size,
    }
    serve_requests(run, info)


if __name__ == "__main__":
    main()
