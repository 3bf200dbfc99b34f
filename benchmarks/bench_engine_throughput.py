"""Engine throughput: ModelRunner vs Hugging Face `generate`, same weights and dtype.

Runs on a ~100M-parameter random Llama (made with make_model unless --model-dir
is given). Decode tokens/s is measured as (full run - prefill-only run), for
both systems, so prefill cost cancels. Also reports the share of a batch-16
decode step spent outside the model forward (input prep + LM head/sampling).

    .venv/bin/python benchmarks/bench_engine_throughput.py --threads 2

fp32 by default (this project's CPU has no native bf16: bf16 is emulated there and
no faster). The engine compiles its fused regions and paged decode kernel unless
--no-compile; warm-up runs take the compile time out of the figures.
For the comparison with vLLM see benchmarks/vs_vllm/bench_vs_vllm.py.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner, SeqChunk
from augserve.engine.runner_config import RunnerConfig
from augserve.engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0)
# Wall clock by default; `--clock cpu` (process CPU time) with --threads 1 is robust
# on a shared, oversubscribed host where wall time mostly measures other tenants.
CLOCK: Callable[[], float] = time.perf_counter


def _prompts(batch: int, length: int, vocab: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(batch * 1000 + length)
    return torch.randint(3, vocab, (batch, length), generator=g).tolist()


def ours_generate(runner: ModelRunner, prompts: list[list[int]], new_tokens: int) -> list[float]:
    """Greedy loop: one prefill step for all prompts, then decode steps.

    Returns clock stamps: the start, then one after each sampled token."""
    bs = runner.block_size
    need = (len(prompts[0]) + new_tokens + bs - 1) // bs
    tables = [list(range(i * need, (i + 1) * need)) for i in range(len(prompts))]
    seqs = [list(p) for p in prompts]
    stamps = [CLOCK()]
    chunks = [SeqChunk(f"s{i}", p, 0, tables[i], True, GREEDY) for i, p in enumerate(prompts)]
    for _ in range(new_tokens):
        for s, tok in zip(seqs, runner.execute(chunks), strict=True):
            assert tok is not None
            s.append(tok)
        stamps.append(CLOCK())
        chunks = [
            SeqChunk(f"s{i}", [s[-1]], len(s) - 1, tables[i], True, GREEDY)
            for i, s in enumerate(seqs)
        ]
    return stamps


def hf_generate(model: Any, prompts: list[list[int]], new_tokens: int) -> list[float]:
    """HF greedy `generate`; a logits processor stamps the clock after every forward."""
    from transformers import LogitsProcessor, LogitsProcessorList

    stamps: list[float] = []

    class _Stamp(LogitsProcessor):  # type: ignore[misc]
        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            stamps.append(CLOCK())
            return scores

    ids = torch.tensor(prompts, device=model.device)
    stamps.append(CLOCK())
    with torch.inference_mode():
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=2,
            logits_processor=LogitsProcessorList([_Stamp()]),
        )
    return stamps


def measure(
    runner: ModelRunner, hf: Any, batch: int, prompt: int, steps: int, reps: int
) -> tuple[tuple[float, float], tuple[float, float]]:
    """((ours decode, HF decode), (ours prefill, HF prefill)) tokens/s, best of `reps`.

    Prefill = start to first token; decode = first to last token (steps forwards).
    The two systems run alternately so a busy host hurts both alike."""
    prompts = _prompts(batch, prompt, runner.vocab_size)
    gens: list[Callable[[int], list[float]]] = [lambda n: ours_generate(runner, prompts, n)]
    if hf is not None:
        gens.append(lambda n: hf_generate(hf, prompts, n))
    for g in gens:
        g(2)  # warm-up
    dec = [0.0] * len(gens)
    pf = [0.0] * len(gens)
    for _ in range(reps):
        for k, g in enumerate(gens):
            st = g(steps + 1)
            pf[k] = max(pf[k], batch * prompt / (st[1] - st[0]))
            if steps:
                dec[k] = max(dec[k], batch * steps / (st[-1] - st[1]))
    if hf is None:
        dec.append(float("nan"))
        pf.append(float("nan"))
    return (dec[0], dec[1]), (pf[0], pf[1])


def overhead_share(runner: ModelRunner, batch: int, prompt: int, steps: int) -> dict[str, float]:
    """Share of decode step time at `batch`: input prep, layer stack, LM head, sampler."""
    prompts = _prompts(batch, prompt, runner.vocab_size)
    bs = runner.block_size
    need = (prompt + steps + bs - 1) // bs
    tables = [list(range(i * need, (i + 1) * need)) for i in range(batch)]
    runner.execute(
        [SeqChunk(f"s{i}", p, 0, tables[i], True, GREEDY) for i, p in enumerate(prompts)]
    )
    t = dict.fromkeys(("prep", "layers", "lm_head", "sampler"), 0.0)
    for step in range(steps):
        chunks = [
            SeqChunk(f"s{i}", [5], prompt + step, tables[i], True, GREEDY) for i in range(batch)
        ]
        t0 = CLOCK()
        inp = runner.prepare(chunks)
        t1 = CLOCK()
        hidden = runner.run_model(inp)
        t2 = CLOCK()
        with torch.inference_mode():
            logits = runner.model.compute_logits(hidden.index_select(0, inp.sample_idx))
        t3 = CLOCK()
        runner.sampler(logits, inp.sample_params, inp.sample_pos)
        t4 = CLOCK()
        for k, dt in zip(t, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            t[k] += dt
    total = sum(t.values())
    return {k: v / total for k, v in t.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model-dir", type=Path, default=None)
    p.add_argument("--dtype", default="fp32", choices=["bf16", "fp32"])
    p.add_argument("--no-compile", action="store_true", help="the eager reference path")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--prompt", type=int, default=64, help="prompt length for decode runs")
    p.add_argument("--steps", type=int, default=16, help="decode steps measured")
    p.add_argument("--prefill", default="8x256", help="BATCHxLEN for the prefill run")
    p.add_argument("--reps", type=int, default=2, help="repeats; the best time is kept")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    p.add_argument("--skip-hf", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    global CLOCK
    CLOCK = time.process_time if a.clock == "cpu" else time.perf_counter
    model_dir = a.model_dir or make_model("llama", "100m", Path(tempfile.mkdtemp()) / "llama100m")
    tdtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    kv = KVCacheConfig(block_size=16, num_device_blocks=1024)
    runner = ModelRunner(
        RunnerConfig(str(model_dir), a.dtype, "cpu", kv, a.threads, compile=not a.no_compile)
    )
    n_params = sum(t.numel() for t in runner.model.parameters())
    print(
        f"model {model_dir} params={n_params / 1e6:.1f}M dtype={a.dtype} "
        f"threads={a.threads} clock={a.clock} attention={runner.attention_backend}"
    )
    hf = None
    if not a.skip_hf:
        from transformers import AutoModelForCausalLM

        hf = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=tdtype).eval()
    print(f"{'workload':<32}{'ours tok/s':>12}{'HF tok/s':>12}{'ratio':>8}", flush=True)

    def row(name: str, o: float, h: float) -> None:
        print(f"{name:<32}{o:>12.1f}{h:>12.1f}{o / h:>8.2f}", flush=True)

    for b in [int(x) for x in a.batches.split(",")]:
        (o, h), _ = measure(runner, hf, b, a.prompt, a.steps, a.reps)
        row(f"decode batch {b} (prompt {a.prompt})", o, h)
    pb, pl = (int(x) for x in a.prefill.split("x"))
    _, (o, h) = measure(runner, hf, pb, pl, 0, a.reps)
    row(f"prefill {pb} x {pl}", o, h)
    sh = overhead_share(runner, 16, a.prompt, 8)
    print(
        f"batch-16 decode step shares: input prep {sh['prep']:.1%}, layer stack "
        f"{sh['layers']:.1%}, LM head {sh['lm_head']:.1%}, sampler {sh['sampler']:.1%}; "
        f"outside the model forward (prep + sampler) {sh['prep'] + sh['sampler']:.1%}"
    )


if __name__ == "__main__":
    main()
