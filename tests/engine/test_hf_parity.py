"""Greedy tokens from ModelRunner equal Hugging Face transformers' (fp32).

Untied models (an LM head of their own) for Llama, OPT and GPT-J: on a tied random
model greedy decoding mostly repeats the last prompt token, which proves little.
Covered: plain decode, chunked prefill mixed with other sequences' decodes, a context
swapped to host and back into other blocks, a context discarded and recomputed, and
the compiled path (fused regions + the block-wise paged kernel).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner, SeqChunk
from augserve.engine.runner_config import RunnerConfig
from tests.engine.conftest import VARIANTS
from tests.engine.helpers import DEVICE, GREEDY, hf_greedy, make_prompts, run_greedy

STEPS = 64
ARCHS = ("llama", "opt", "gptj")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def untied(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("untied")
    return {
        a: make_model(a, "tiny", root / a, seed=10 + i, untied=True) for i, a in enumerate(ARCHS)
    }


def _runner(
    d: Path, compile: bool = False, host_blocks: int = 0, prepack: bool = False
) -> ModelRunner:
    kv = KVCacheConfig(block_size=8, num_device_blocks=128, num_host_blocks=host_blocks)
    return ModelRunner(RunnerConfig(str(d), "fp32", DEVICE, kv, compile=compile, prepack=prepack))


def _prefill(r: ModelRunner, tokens: list[int], table: list[int], chunk: int = 7) -> int:
    """Compute `tokens` into the blocks of `table` in chunks; the next greedy token."""
    tok = None
    for s in range(0, len(tokens), chunk):
        part = tokens[s : s + chunk]
        last = s + len(part) == len(tokens)
        (tok,) = r.execute([SeqChunk("a", part, s, table, last, GREEDY)])
    assert tok is not None
    return tok


def _decode(r: ModelRunner, ctx: list[int], table: list[int], steps: int) -> list[int]:
    """Greedy decode after a cached context whose last token is not yet computed."""
    out = []
    for _ in range(steps):
        (tok,) = r.execute([SeqChunk("a", ctx[-1:], len(ctx) - 1, table, True, GREEDY)])
        assert tok is not None
        out.append(tok)
        ctx = ctx + [tok]
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_untied_decode_and_chunked_batch_match_hf(untied: dict[str, Path], arch: str) -> None:
    """One request alone, then four of different lengths in 7-token chunks with decodes."""
    d = untied[arch]
    r = _runner(d)
    prompts = make_prompts(4, r.vocab_size, seed=3)
    refs = [hf_greedy(d, p, STEPS) for p in prompts]
    assert len(set(refs[3])) > 4  # an untied model does not just repeat one token
    assert run_greedy(r, prompts[3:], STEPS)[0] == refs[3]
    assert run_greedy(r, prompts, STEPS, chunk=7, stagger=2) == refs


@pytest.mark.parametrize("arch", ARCHS)
def test_swapped_and_recomputed_contexts_continue_like_hf(
    untied: dict[str, Path], arch: str
) -> None:
    d = untied[arch]
    r = _runner(d, host_blocks=16)
    prompt = make_prompts(3, r.vocab_size, seed=5)[2]  # 23 tokens
    ref = hf_greedy(d, prompt, 30)
    table = list(range(10, 16))  # 48 positions
    ctx = prompt + [_prefill(r, prompt, table)]
    ctx += _decode(r, ctx, table, 9)  # 10 generated, the last not yet in the cache
    # swapped: out to host, the device blocks clobbered, back into other blocks
    r.swap_out([(b, i) for i, b in enumerate(table)])
    for t in r.kv.k_caches + r.kv.v_caches:
        t[table] = torch.randn_like(t[table])
    moved = list(range(40, 46))
    r.swap_in([(i, b) for i, b in enumerate(moved)])
    swapped = ctx + _decode(r, ctx, moved, 10)
    # recomputed: prompt + generated tokens prefilled again, in chunks, in fresh blocks
    fresh = list(range(70, 76))
    recomputed = swapped[:-5] + [_prefill(r, swapped[:-5], fresh)]
    recomputed += _decode(r, recomputed, fresh, 9)
    assert swapped[len(prompt) :] == ref[:20]
    assert recomputed[len(prompt) :] == ref[:25]


def test_compiled_path_matches_hf(untied: dict[str, Path]) -> None:
    """Fused compiled regions + the compiled paged decode: same greedy ids as HF."""
    d = untied["llama"]
    r = _runner(d, compile=True)
    assert r.attention_backend == "paged-compiled"
    prompts = make_prompts(3, r.vocab_size, seed=9)
    assert run_greedy(r, prompts, 24, chunk=7, stagger=1) == [hf_greedy(d, p, 24) for p in prompts]


@pytest.mark.skipif(DEVICE != "cpu", reason="oneDNN prepacking is for the CPU")
@pytest.mark.parametrize("arch", ARCHS)
def test_prepacked_linears_match_hf(untied: dict[str, Path], arch: str) -> None:
    """Every projection and the LM head on oneDNN-prepacked weights: HF's greedy ids,
    alone and chunked among other sequences' decodes; compiled too for Llama."""
    d = untied[arch]
    r = _runner(d, prepack=True)
    assert r.prepacked
    prompts = make_prompts(4, r.vocab_size, seed=3)
    refs = [hf_greedy(d, p, 32) for p in prompts]
    assert run_greedy(r, prompts, 32, chunk=7, stagger=2) == refs
    if arch == "llama":
        rc = _runner(d, compile=True, prepack=True)
        assert run_greedy(rc, prompts, 32, chunk=7, stagger=1) == refs


@pytest.mark.skipif(DEVICE != "cpu", reason="oneDNN prepacking is for the CPU")
@pytest.mark.parametrize("variant", ["qwen2_bias", "opt"])
def test_prepacked_tied_lm_head_matches_hf(model_dirs: dict[str, Path], variant: str) -> None:
    """A tied LM head (the input embedding) is packed too, and still embeds."""
    d = model_dirs[variant]
    r = _runner(d, prepack=True)
    assert r.model.logits_prepacked
    prompt = make_prompts(1, r.vocab_size, seed=7)[0]
    assert run_greedy(r, [prompt], STEPS)[0] == hf_greedy(d, prompt, STEPS)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_single_request_matches_hf(model_dirs: dict[str, Path], variant: str) -> None:
    """Every config variant of the shared fixtures (GQA, rope scaling, Qwen2 bias...)."""
    d = model_dirs[variant]
    runner = _runner(d)
    prompt = make_prompts(1, runner.vocab_size, seed=7)[0]
    assert run_greedy(runner, [prompt], STEPS)[0] == hf_greedy(d, prompt, STEPS)


@pytest.mark.parametrize("arch", ARCHS)
def test_forward_logits_close_to_hf(untied: dict[str, Path], arch: str) -> None:
    """Chunked prefill logits (two chunks) match HF's full-prompt logits."""
    from transformers import AutoModelForCausalLM

    d = untied[arch]
    runner = _runner(d)
    prompt = make_prompts(1, runner.vocab_size, seed=5)[0] + [7] * 10
    table = list(range(8))
    runner.forward_logits([SeqChunk("a", prompt[:9], 0, table, False)])
    ours = runner.forward_logits([SeqChunk("a", prompt[9:], 9, table, True)])[0]
    hf = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).to(DEVICE).eval()
    with torch.inference_mode():
        ref = hf(torch.tensor([prompt], device=DEVICE)).logits[0, -1]
    torch.testing.assert_close(ours.cpu(), ref.cpu(), atol=1e-4, rtol=1e-4)
