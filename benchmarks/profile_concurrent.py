"""Where the time of bench_vs_llamacpp.py's "8 concurrent 128 -> 128" goes, in process.

The same eight prompts, `max_tokens` 128 and `ignore_eos`, the server's engine settings
(`serve --profile default`: a 512-token step budget, no start-up fit; at most 8 sequences)
on a GGUF file, through `LLM.generate` (no HTTP). Every engine step is timed: its
scheduling, its forward and sampling (`execute`) and its commit, and classed by what it
computed (decode rows only, or prefill tokens too). Prints and writes the split; the
wall time beside the server's measured aggregate says what the HTTP path adds.

    python benchmarks/profile_concurrent.py \
        --gguf /tmp/augserve-vs-llamacpp/random-qwen2-0.5b.Q4_0.gguf \
        [--threads 2] [--out runs/profile-concurrent.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_vs_llamacpp import HELD_OUT  # noqa: E402

from augserve.bench.report import git_commit, write_json  # noqa: E402


def timed_engine(llm: Any) -> list[dict[str, Any]]:
    """Wrap the engine's schedule / execute / commit with timers; one row per step."""
    eng, steps = llm.engine, []
    schedule, execute, commit = eng.schedule, eng.execute, eng.commit

    def t_schedule(now: float) -> Any:
        t0 = time.perf_counter()
        out = schedule(now)
        steps.append({"schedule_s": time.perf_counter() - t0, "rows": len(out.chunks),
                      "prefill_tokens": sum(c.num_tokens for c in out.chunks if c.num_tokens > 1),
                      "tokens": out.num_scheduled_tokens})  # fmt: skip
        return out

    def t_execute(out: Any) -> Any:
        t0 = time.perf_counter()
        res = execute(out)
        steps[-1]["execute_s"] = time.perf_counter() - t0
        return res

    def t_commit(out: Any, results: Any, end: float) -> Any:
        t0 = time.perf_counter()
        res = commit(out, results, end)
        steps[-1]["commit_s"] = time.perf_counter() - t0
        return res

    eng.schedule, eng.execute, eng.commit = t_schedule, t_execute, t_commit
    return steps


def split(steps: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    by: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in steps:
        if not s["tokens"]:
            continue
        kind = "with_prefill" if s["prefill_tokens"] else "decode_only"
        row = by[kind]
        row["steps"] += 1
        row["tokens"] += s["tokens"]
        for k in ("schedule_s", "execute_s", "commit_s"):
            row[k] += s.get(k, 0.0)
    return {k: dict(v) for k, v in by.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gguf", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="runs/profile-concurrent.json")
    a = p.parse_args()
    from augserve import LLM, SamplingParams
    from augserve.engine.resolve import resolve_model

    model = resolve_model(a.gguf)
    llm = LLM(model, policy="augserve", max_batch_tokens=512, max_num_seqs=8,
              num_threads=a.threads, fit_latency=False)  # fmt: skip
    sp = SamplingParams(temperature=0.0, max_tokens=128, ignore_eos=True)
    llm.generate(["Hello"], SamplingParams(temperature=0.0, max_tokens=8))  # warm up
    steps = timed_engine(llm)
    t0 = time.perf_counter()
    outs = llm.generate([f"Story {i}: " + HELD_OUT[:400] for i in range(8)], sp)
    wall = time.perf_counter() - t0
    made = sum(len(o.outputs[0].token_ids) for o in outs)
    prompt = sum(len(o.prompt_token_ids) for o in outs)
    parts = split(steps)
    for kind, row in parts.items():
        n = row["steps"]
        print(f"{kind:13s} steps {n:4.0f} tokens {row['tokens']:6.0f}  "
              f"execute {row['execute_s']:7.3f} s ({1000 * row['execute_s'] / n:6.1f} ms/step)  "
              f"schedule {row['schedule_s']:6.3f} s  commit {row['commit_s']:6.3f} s")  # fmt: skip
    print(f"wall {wall:.3f} s for {made} tokens ({made / wall:.1f} tok/s), prompts {prompt} tokens")
    write_json(Path(a.out), steps, command=" ".join(sys.argv), commit=git_commit(),
               gguf=a.gguf, threads=a.threads, wall_s=wall, tokens=made,
               prompt_tokens=prompt, split=parts)  # fmt: skip


if __name__ == "__main__":
    main()
