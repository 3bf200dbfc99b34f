"""Greedy tokens from ModelRunner equal Hugging Face transformers' (fp32, 64 steps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from augserve.engine.model_runner import ModelRunner
from tests.engine.conftest import VARIANTS
from tests.engine.helpers import hf_greedy, make_prompts, run_greedy

STEPS = 64
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def _runner(d: Path) -> ModelRunner:
    return ModelRunner.from_dir(d, "fp32", block_size=8, num_device_blocks=128)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_single_request_matches_hf(model_dirs: dict[str, Path], variant: str) -> None:
    d = model_dirs[variant]
    runner = _runner(d)
    prompt = make_prompts(1, runner.vocab_size, seed=7)[0]
    ours = run_greedy(runner, [prompt], STEPS)[0]
    assert ours == hf_greedy(d, prompt, STEPS)


@pytest.mark.parametrize("variant", ["llama_gqa", "qwen2_bias", "opt", "gptj"])
def test_mixed_chunked_batch_matches_hf(model_dirs: dict[str, Path], variant: str) -> None:
    """Different prompt lengths, 7-token prefill chunks, decodes interleaved with prefills."""
    d = model_dirs[variant]
    runner = _runner(d)
    prompts = make_prompts(4, runner.vocab_size, seed=3)
    ours = run_greedy(runner, prompts, STEPS, chunk=7, stagger=2)
    for prompt, got in zip(prompts, ours, strict=True):
        assert got == hf_greedy(d, prompt, STEPS)


@pytest.mark.parametrize("variant", ["llama_gqa", "opt", "gptj"])
def test_forward_logits_close_to_hf(model_dirs: dict[str, Path], variant: str) -> None:
    """Chunked prefill logits (two chunks) match HF's full-prompt logits."""
    import torch
    from transformers import AutoModelForCausalLM

    from augserve.engine.model_runner import SeqChunk

    d = model_dirs[variant]
    runner = _runner(d)
    prompt = make_prompts(1, runner.vocab_size, seed=5)[0] + [7] * 10
    table = list(range(8))
    runner.forward_logits([SeqChunk("a", prompt[:9], 0, table, False)])
    ours = runner.forward_logits([SeqChunk("a", prompt[9:], 9, table, True)])[0]
    hf = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()
    with torch.inference_mode():
        ref = hf(torch.tensor([prompt])).logits[0, -1]
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=1e-4)
