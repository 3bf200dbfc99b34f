"""Continuous batching with chunked prefill gives each request its solo greedy tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from augserve.core.config import SchedulerConfig
from augserve.engine.engine import LLMEngine
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner
from augserve.engine.sampling_params import SamplingParams
from augserve.sched.invariants import check_invariants


@pytest.fixture(scope="module", params=["llama", "opt"])
def model_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model(request.param, "tiny", tmp_path_factory.mktemp("cb") / "m", seed=5)


def run(
    engine: LLMEngine, arrivals: dict[int, list[tuple]]
) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Virtual-time loop; returns generated tokens per request and chunk-kind counts."""
    outs: dict[str, list[int]] = {}
    kinds = {"partial": 0, "mixed": 0}
    for i in range(5000):
        for args in arrivals.get(i, []):
            engine.add_request(*args, now=i * 0.01)
        step = engine.step(i * 0.01)
        out = step.scheduled
        check_invariants(engine.scheduler, out)
        kinds["partial"] += sum(1 for c in out.chunks if not c.sample)
        if any(c.is_decode for c in out.chunks) and any(not c.is_decode for c in out.chunks):
            kinds["mixed"] += 1
        for o in step.outputs:
            if o.finished:
                outs[o.request_id] = o.token_ids
        if not engine.has_unfinished() and i >= max(arrivals):
            return outs, kinds
    raise AssertionError("did not drain")


@pytest.mark.parametrize("policy", ["vllm", "augserve"])
def test_batched_equals_alone(model_dir: Path, policy: str) -> None:
    runner = ModelRunner.from_dir(model_dir, "fp32", block_size=4, num_device_blocks=96)
    engine = LLMEngine(runner, SchedulerConfig(policy=policy, max_batch_tokens=8))
    prompts = [
        [3 + (13 * i + 7 * r) % 500 for i in range(n)] for r, n in enumerate([5, 23, 14, 31])
    ]
    params = [
        SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=m) for m in (12, 9, 15, 7)
    ]
    arrivals = {
        0: [("r0", prompts[0], params[0]), ("r1", prompts[1], params[1])],
        4: [("r2", prompts[2], params[2])],
        7: [("r3", prompts[3], params[3])],
    }
    batched, kinds = run(engine, arrivals)
    assert kinds["partial"] > 0 and kinds["mixed"] > 0  # chunked prefill beside decodes
    for k in range(4):
        solo, _ = run(engine, {0: [(f"solo{k}", prompts[k], params[k])]})
        assert batched[f"r{k}"] == solo[f"solo{k}"], f"request r{k}"
        assert len(solo[f"solo{k}"]) == params[k].max_tokens
