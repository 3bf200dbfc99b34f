"""bf16 runs the same code paths (decode batch, chunked prefill) close to fp32."""

from __future__ import annotations

from pathlib import Path

import torch

from augserve.engine.model_runner import ModelRunner, SeqChunk
from tests.engine.helpers import make_prompts


def _step_logits(runner: ModelRunner, prompts: list[list[int]]) -> torch.Tensor:
    """Prefill all but 8 tokens in 2 chunks, then a decode batch of every sequence."""
    tables = [list(range(i * 8, i * 8 + 8)) for i in range(len(prompts))]
    first = [SeqChunk(f"s{i}", p[:5], 0, tables[i], False) for i, p in enumerate(prompts)]
    runner.forward_logits(first)
    rest = [SeqChunk(f"s{i}", p[5:-1], 5, tables[i], False) for i, p in enumerate(prompts)]
    runner.forward_logits(rest)
    dec = [SeqChunk(f"s{i}", p[-1:], len(p) - 1, tables[i], True) for i, p in enumerate(prompts)]
    return runner.forward_logits(dec)


def test_bf16_close_to_fp32(model_dirs: dict[str, Path]) -> None:
    d = model_dirs["llama_gqa"]
    prompts = [p + [9, 9, 9] for p in make_prompts(3, 512, seed=2)]
    ref = _step_logits(ModelRunner.from_dir(d, "fp32", block_size=8), prompts)
    got = _step_logits(ModelRunner.from_dir(d, "bf16", block_size=8), prompts)
    assert got.dtype == torch.float32
    assert (got - ref).abs().max() < 0.1 * ref.abs().max()
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() >= 2 / 3
