"""A request paused in a call continues exactly as if it had never paused.

Under each forced context policy (preserve, swap, discard) the paused
request's tokens equal those of a pause-free run with the same returned
tokens in its context (greedy, fp32), and swapped KV blocks come back
bit-identical.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from augserve.core.config import SchedulerConfig
from augserve.core.request import ContextPolicy, Request, Segment
from augserve.engine.engine import LLMEngine
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.swaps import order_swaps
from augserve.engine.tokenizer import Tokenizer
from augserve.sched.invariants import check_invariants

GREEDY = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=64)
BLOCK = 4


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("pause") / "m", seed=3)


def make_engine(
    model_dir: Path, config: SchedulerConfig, device_blocks: int, host_blocks: int
) -> LLMEngine:
    runner = ModelRunner.from_dir(
        model_dir,
        "fp32",
        block_size=BLOCK,
        num_device_blocks=device_blocks,
        num_host_blocks=host_blocks,
    )
    return LLMEngine(runner, config, Tokenizer(model_dir))


def drive(
    engine: LLMEngine, arrivals: dict[int, list[tuple]], dt: float = 0.01, max_steps: int = 2000
) -> dict[str, Request]:
    """Virtual-time loop: add requests at given steps; scripted calls return after
    their duration. Invariants are checked after every step."""
    now, returns, done = 0.0, {}, {}
    for i in range(max_steps):
        for args in arrivals.get(i, []):
            engine.add_request(*args, now=now)
        for rid, (t, ids) in list(returns.items()):
            if t <= now:
                del returns[rid]
                engine.resume(rid, ids, now=now)
        step = engine.step(now)
        check_invariants(engine.scheduler, step.scheduled)
        for call in step.calls:
            returns[call.request_id] = (now + call.scripted.duration, list(call.scripted.token_ids))
        for req in step.finished:
            done[req.request_id] = req
        now += dt
        if not engine.has_unfinished() and i >= max(arrivals, default=0):
            return done
    raise AssertionError("workload did not drain")


def alone(engine: LLMEngine, prompt: list[int], n: int) -> list[int]:
    params = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=n)
    req = drive(engine, {0: [("ref", prompt, params)]})["ref"]
    return req.token_ids[len(prompt) :]


class KVWatch:
    """Snapshots blocks at swap-out, compares them at swap-in."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.snap: dict[int, list[torch.Tensor]] = {}
        self.compared = 0
        self.swapped_out = 0
        orig_out, orig_in = runner.swap_out, runner.swap_in

        def swap_out(pairs: list[tuple[int, int]]) -> None:
            for dev, host in pairs:
                self.snap[host] = [t[dev].clone() for t in self.caches()]
            self.swapped_out += len(pairs)
            orig_out(pairs)

        def swap_in(pairs: list[tuple[int, int]]) -> None:
            orig_in(pairs)
            for host, dev in pairs:
                for now_t, before in zip(self.caches(), self.snap.pop(host), strict=True):
                    assert torch.equal(now_t[dev], before), "swapped-in KV differs"
                self.compared += 1

        runner.swap_out = swap_out  # type: ignore[method-assign]
        runner.swap_in = swap_in  # type: ignore[method-assign]

    def caches(self) -> list[torch.Tensor]:
        return self.runner.kv.k_caches + self.runner.kv.v_caches


@pytest.mark.parametrize(
    ("policy", "lazy", "device_blocks"),
    [
        (ContextPolicy.PRESERVE, True, 24),
        (ContextPolicy.SWAP, False, 24),  # eager: evicted at the first iteration of the call
        (ContextPolicy.DISCARD, False, 24),
        (ContextPolicy.SWAP, True, 11),  # lazy: evicted because the other request needs memory
        (ContextPolicy.DISCARD, True, 11),
    ],
)
def test_pause_resume_is_exact(
    model_dir: Path, policy: ContextPolicy, lazy: bool, device_blocks: int
) -> None:
    config = SchedulerConfig(
        policy="infercept",
        forced_context_policy=policy,
        lazy_eviction=lazy,
        swap_budget_blocks=64,
        max_batch_tokens=64,
    )
    engine = make_engine(model_dir, config, device_blocks, host_blocks=16)
    watch = KVWatch(engine.runner)
    prompt_a = [5 + (7 * i) % 400 for i in range(13)]
    prompt_b = [9 + (11 * i) % 400 for i in range(10)]
    plan_a = [Segment(6, call_time=0.3, return_len=5), Segment(8)]
    plan_b = [Segment(26)]
    done = drive(
        engine, {0: [("a", prompt_a, GREEDY, plan_a)], 3: [("b", prompt_b, GREEDY, plan_b)]}
    )
    a, b = done["a"], done["b"]
    assert a.calls[0].policy is policy
    gen1 = a.token_ids[13:19]
    returned = a.token_ids[19:24]
    assert returned == engine.filler_ids[:5]
    gen2 = a.token_ids[24:]
    assert len(gen2) == 8

    # The pause-free reference: same context, no call in between.
    assert alone(engine, prompt_a, 6) == gen1
    assert alone(engine, prompt_a + gen1 + returned, 8) == gen2
    assert alone(engine, prompt_b, 26) == b.token_ids[10:]
    if policy is ContextPolicy.SWAP:
        assert watch.swapped_out > 0 and watch.compared == watch.swapped_out
    else:
        assert watch.swapped_out == 0
    pool = engine.scheduler.pool
    assert pool.num_free_device == pool.num_device_blocks
    assert pool.num_free_host == pool.num_host_blocks


def test_partial_swap_is_exact(model_dir: Path) -> None:
    """A swap budget of one block per iteration: the request is swapped out (and in)
    a block at a time, across iterations."""
    config = SchedulerConfig(
        policy="infercept",
        forced_context_policy=ContextPolicy.SWAP,
        lazy_eviction=False,
        swap_budget_blocks=1,
        max_batch_tokens=64,
    )
    engine = make_engine(model_dir, config, 24, host_blocks=16)
    watch = KVWatch(engine.runner)
    prompt = [3 + (5 * i) % 300 for i in range(17)]
    plan = [Segment(5, call_time=0.1, return_len=3), Segment(6)]
    a = drive(engine, {0: [("a", prompt, GREEDY, plan)]})["a"]
    assert watch.swapped_out >= 5 and watch.compared == watch.swapped_out
    gen1, ret, gen2 = a.token_ids[17:22], a.token_ids[22:25], a.token_ids[25:]
    assert alone(engine, prompt, 5) == gen1
    assert alone(engine, prompt + gen1 + ret, 6) == gen2


def test_swap_order_respects_block_reuse() -> None:
    # a device block freed by a swap-out is the target of a swap-in: out first
    assert order_swaps([(3, 0)], [(5, 3)]) == [("out", [(3, 0)]), ("in", [(5, 3)])]
    # a host block freed by a swap-in is the target of a swap-out: in first
    assert order_swaps([(2, 7)], [(7, 4)]) == [("in", [(7, 4)]), ("out", [(2, 7)])]
    # independent moves go in one batch each
    assert order_swaps([(1, 1)], [(2, 2)]) == [("out", [(1, 1)]), ("in", [(2, 2)])]


def test_vllm_policy_discards_and_requeues_exactly(model_dir: Path) -> None:
    """vLLM's baseline: every call discards the KV; on return the request recomputes."""
    engine = make_engine(model_dir, SchedulerConfig(policy="vllm", max_batch_tokens=16), 32, 0)
    prompt = [7 + (3 * i) % 200 for i in range(11)]
    plan = [
        Segment(3, call_time=0.05, return_len=4),
        Segment(4, call_time=0.05, return_len=2),
        Segment(5),
    ]
    a = drive(engine, {0: [("a", prompt, GREEDY, plan)]})["a"]
    assert [c.policy for c in a.calls] == [ContextPolicy.DISCARD, ContextPolicy.DISCARD]
    ctx = list(prompt)
    for n, ret in ((3, 4), (4, 2), (5, 0)):
        gen = alone(engine, ctx, n)
        assert a.token_ids[len(ctx) : len(ctx) + n] == gen
        ctx = ctx + gen + engine.filler_ids[:ret]
    assert a.token_ids == ctx
