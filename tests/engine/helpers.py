"""A minimal greedy driver over ModelRunner (chunked prefill, interleaved decodes)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from augserve.engine.model_runner import ModelRunner, SeqChunk
from augserve.engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=64)
# Where the runners and the HF references of the parity tests run: CPU unless
# AUGSERVE_TEST_DEVICE says otherwise (benchmarks/gpu_checks.sh sets "cuda").
DEVICE = os.environ.get("AUGSERVE_TEST_DEVICE", "cpu")


@dataclass
class Seq:
    seq_id: str
    tokens: list[int]
    prompt_len: int
    start_step: int
    num_computed: int = 0
    block_table: list[int] = field(default_factory=list)

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_len :]


def run_greedy(
    runner: ModelRunner,
    prompts: list[list[int]],
    steps: int,
    chunk: int = 10**9,
    stagger: int = 0,
    params: SamplingParams = GREEDY,
) -> list[list[int]]:
    """Generate `steps` tokens per prompt; request i joins at step i * stagger."""
    free = list(range(runner.num_device_blocks))[::-1]
    seqs = [Seq(f"s{i}", list(p), len(p), i * stagger) for i, p in enumerate(prompts)]
    step = 0
    while any(len(s.generated) < steps for s in seqs):
        chunks, owners = [], []
        for s in seqs:
            if step < s.start_step or len(s.generated) >= steps:
                continue
            n = min(chunk, len(s.tokens) - s.num_computed)
            end = s.num_computed + n
            while len(s.block_table) * runner.block_size < end:
                s.block_table.append(free.pop())
            toks = s.tokens[s.num_computed : end]
            chunks.append(
                SeqChunk(
                    s.seq_id,
                    toks,
                    s.num_computed,
                    list(s.block_table),
                    end == len(s.tokens),
                    params,
                )
            )
            owners.append(s)
        for s, c, tok in zip(owners, chunks, runner.execute(chunks), strict=True):
            s.num_computed += len(c.token_ids)
            if tok is not None:
                s.tokens.append(tok)
        step += 1
    return [s.generated[:steps] for s in seqs]


def hf_greedy(model_dir: Path, prompt: list[int], steps: int) -> list[int]:
    """Reference greedy tokens from transformers (fp32, KV cache, no EOS stop)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.to(DEVICE).eval()
    out: list[int] = []
    with torch.inference_mode():
        res = model(torch.tensor([prompt], device=DEVICE), use_cache=True)
        for _ in range(steps):
            tok = int(res.logits[0, -1].argmax())
            out.append(tok)
            nxt = torch.tensor([[tok]], device=DEVICE)
            res = model(nxt, past_key_values=res.past_key_values, use_cache=True)
    return out


def make_prompts(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lens = [5 + 9 * i for i in range(n)]
    return [torch.randint(3, vocab, (length,), generator=g).tolist() for length in lens]
