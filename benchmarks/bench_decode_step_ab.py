"""A kernel change's whole decode step, side by side in one process.

One engine on a GGUF file (`serve --profile default`'s settings: at most 8 sequences),
eight greedy requests decoding together; the fused native decode step
(`native/decoder.py`) alternates between the library built from `--base`'s sources
(bench_kernel_ab.py) and the working tree's, round by round on the same weights and
caches. Per round the median decode-only step (8 rows; prefill steps run the working
tree's products either way and are left out); the generated tokens must be identical.

    python benchmarks/bench_decode_step_ab.py --base HEAD \
        --gguf /tmp/augserve-vs-llamacpp/random-qwen2-0.5b.Q4_0.gguf [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_kernel_ab import base_library, commit_of  # noqa: E402
from profile_concurrent import timed_engine  # noqa: E402

from augserve.engine.native import build  # noqa: E402


def rounds(llm: Any, libs: dict[str, Any], n: int, tokens: int) -> dict[str, Any]:
    from augserve import SamplingParams

    native = llm.engine.runner.native
    if native is None:
        raise SystemExit("this model does not run the fused native decode step")
    sp = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    prompts = [f"Story {i}: once upon a time" for i in range(8)]
    llm.generate(prompts, sp)  # warm-up: every buffer at its size
    steps = timed_engine(llm)
    ms: dict[str, list[float]] = {k: [] for k in libs}
    ids: dict[str, list[list[int]]] = {}
    for _ in range(n):
        for key, lib in libs.items():
            native._lib = lib
            steps.clear()
            outs = llm.generate(prompts, sp)
            ids.setdefault(key, [list(o.outputs[0].token_ids) for o in outs])
            dec = [s["execute_s"] for s in steps if s["tokens"] and not s["prefill_tokens"]]
            ms[key].append(1000 * statistics.median(dec))
    base, new = statistics.median(ms["base"]), statistics.median(ms["new"])
    return {"per_round_ms": ms, "base_ms": base, "new_ms": new, "base_over_new": base / new,
            "same_tokens": ids["base"] == ids["new"]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision whose kernels are the baseline")
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    from augserve import LLM
    from augserve.engine.resolve import resolve_model

    load = os.getloadavg()[0]
    cc = build.compiler()
    if cc is None:
        raise SystemExit("no C compiler")
    llm = LLM(resolve_model(a.gguf), policy="augserve", max_batch_tokens=512, max_num_seqs=8,
              num_threads=a.threads, fit_latency=False)  # fmt: skip
    libs = {"base": base_library(a.base, cc), "new": build.load()}
    row = rounds(llm, libs, a.rounds, a.tokens)
    print(json.dumps({k: v for k, v in row.items() if k != "per_round_ms"}), flush=True)
    meta = {"command": " ".join(sys.argv), "base": a.base, "base_commit": commit_of(a.base),
            "gguf": Path(a.gguf).name,
            "isa": build.isa(), "threads": a.threads, "rounds": a.rounds, "tokens": a.tokens,
            "load_before": load}  # fmt: skip
    if a.out:
        Path(a.out).write_text(json.dumps({"meta": meta, "result": row}, indent=1) + "\n")


if __name__ == "__main__":
    main()
