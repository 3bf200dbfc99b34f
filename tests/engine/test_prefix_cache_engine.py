"""The engine with the prefix cache: a hit's blocks go in the block table, prefill starts
after them, and the greedy tokens are those of the uncached path and of Hugging Face."""

from __future__ import annotations

from pathlib import Path

import pytest

from augserve.core.config import SchedulerConfig
from augserve.engine.engine import LLMEngine
from augserve.engine.kv_cache import KVCacheConfig
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner
from augserve.engine.runner_config import RunnerConfig
from augserve.engine.sampling_params import SamplingParams
from augserve.sched.invariants import check_invariants
from tests.engine.helpers import DEVICE, hf_greedy, make_prompts

STEPS = 12
PARAMS = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=STEPS)
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("apc") / "m", seed=21, untied=True)


def _engine(model_dir: Path, caching: bool, blocks: int = 64) -> LLMEngine:
    kv = KVCacheConfig(block_size=8, num_device_blocks=blocks)
    runner = ModelRunner(RunnerConfig(str(model_dir), "fp32", DEVICE, kv))
    cfg = SchedulerConfig(policy="augserve", max_batch_tokens=64, enable_prefix_caching=caching)
    return LLMEngine(runner, cfg)


def _generate(engine: LLMEngine, rid: str, prompt: list[int], now: float) -> tuple[list[int], int]:
    """Greedy tokens of one request, and the start position of its first chunk."""
    engine.add_request(rid, prompt, PARAMS, now=now)
    first: int | None = None
    for i in range(1000):
        step = engine.step(now + 0.01 * i)
        assert step.scheduled is not None
        check_invariants(engine.scheduler, step.scheduled)
        for c in step.scheduled.chunks:
            if c.request_id == rid and first is None:
                first = c.start_pos
        for o in step.outputs:
            if o.finished and o.request_id == rid:
                assert first is not None
                return o.token_ids, first
    raise AssertionError("did not finish")


def test_cached_and_uncached_paths_give_the_same_greedy_tokens_as_hf(model_dir: Path) -> None:
    (prompt,) = make_prompts(1, 500, seed=3)[:1]
    prompt = (prompt * 10)[:45]
    warm, cold = _engine(model_dir, True), _engine(model_dir, False)
    out_a, start_a = _generate(warm, "a", prompt, 0.0)
    out_b, start_b = _generate(warm, "b", prompt, 10.0)  # the same prompt again
    assert (start_a, start_b) == (0, 40)  # 5 of its 6 blocks hit; the last token runs
    turn2 = prompt + out_a + [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]  # the next turn
    out_c, start_c = _generate(warm, "c", turn2, 20.0)
    assert start_c == 56  # a computed 56 of its 57 tokens: 7 full blocks
    ref_c, cold_start = _generate(cold, "c", turn2, 0.0)
    assert cold_start == 0
    assert out_a == out_b == hf_greedy(model_dir, prompt, STEPS)
    assert out_c == ref_c == hf_greedy(model_dir, turn2, STEPS)
    stats = warm.scheduler.prefix.stats
    assert stats.hits == 40 + 56


def test_eviction_under_pressure_keeps_running_requests_exact(model_dir: Path) -> None:
    """A pool too small for every prefix: cached blocks are evicted for new requests while
    others run; every request still decodes exactly as alone without a cache."""
    prompts = [(p * 8)[: 30 + 7 * i] for i, p in enumerate(make_prompts(6, 500, seed=5))]
    warm = _engine(model_dir, True, blocks=24)
    got = {}
    warm.add_request("p0", prompts[0], PARAMS, now=0.0)
    for i in range(2000):
        if i < len(prompts) * 3 and i % 3 == 0 and i // 3 < len(prompts):
            k = i // 3
            if k:
                warm.add_request(f"p{k}", prompts[k], PARAMS, now=0.01 * i)
            if k >= 2:  # repeats of earlier prompts hit what is left of their cache
                warm.add_request(f"r{k}", prompts[k - 2], PARAMS, now=0.01 * i)
        step = warm.step(0.01 * i)
        assert step.scheduled is not None
        check_invariants(warm.scheduler, step.scheduled)
        for o in step.outputs:
            if o.finished:
                got[o.request_id] = o.token_ids
        if not warm.has_unfinished() and i > len(prompts) * 3:
            break
    assert warm.scheduler.pool.device.num_evictions > 0
    assert warm.scheduler.prefix.stats.hits > 0
    for rid, toks in got.items():
        k = int(rid[1:])
        prompt = prompts[k] if rid[0] == "p" else prompts[k - 2]
        assert toks == hf_greedy(model_dir, prompt, STEPS), rid
