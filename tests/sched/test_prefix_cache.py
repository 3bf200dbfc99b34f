"""Automatic prefix caching in the scheduler (as vLLM v1): hits, sharing, eviction."""

from __future__ import annotations

import pytest
from driver import Driver, easy_profile

from augserve.core.config import SchedulerConfig
from augserve.core.request import ContextPolicy, Request, Segment
from augserve.core.token_ids import synthetic_token_ids
from augserve.predict.base import OraclePredictor
from augserve.sched.invariants import check_invariants
from augserve.sched.policies import uses_prefix_caching
from augserve.sched.scheduler import Scheduler

PROMPT = list(range(1000, 2000))  # 1,000 distinct token ids


def _sched(policy: str = "augserve", **kw) -> Scheduler:
    kw.setdefault("num_device_blocks", 200)
    if policy == "augserve":  # its own default is off (as its paper ran it)
        kw.setdefault("enable_prefix_caching", True)
    cfg = SchedulerConfig(policy=policy, block_size=16, max_batch_tokens=2048, **kw)
    return Scheduler(cfg, easy_profile(), OraclePredictor())


def _req(rid: str, ids: list[int], out: int = 4, now: float = 0.0) -> Request:
    return Request(rid, now, len(ids), [Segment(out)], token_ids=list(ids))


def _first_chunk(d: Driver, req: Request) -> tuple[int, int]:
    for o in d.outputs:
        for c in o.chunks:
            if c.request is req:
                return c.start_pos, c.num_tokens
    raise AssertionError("never scheduled")


def _run(d: Driver) -> None:
    while d.sched.num_live:
        check_invariants(d.sched, d.step(), d.finished)


def test_a_repeated_prompt_starts_after_its_cached_prefix_leaving_the_last_token():
    d = Driver(_sched())
    a = _req("a", PROMPT)
    d.add(a)
    _run(d)
    b = _req("b", PROMPT, now=d.now)
    d.add(b)
    _run(d)
    assert _first_chunk(d, a) == (0, 1000)
    assert _first_chunk(d, b) == (992, 8)  # 62 full blocks hit, 8 tokens computed
    stats = d.sched.prefix.stats
    assert stats.hits == 992 and stats.queries == 2000
    assert d.sched.pool.num_free_device == 200  # cached free blocks count as free


def test_a_prompt_of_whole_blocks_still_computes_its_last_block():
    d = Driver(_sched())
    ids = PROMPT[:64]
    d.add(_req("a", ids))
    _run(d)
    b = _req("b", ids, now=d.now)
    d.add(b)
    _run(d)
    assert _first_chunk(d, b) == (48, 16)  # 3 of 4 blocks: the last token must run


def test_a_different_token_breaks_the_chain_from_its_block_on():
    d = Driver(_sched())
    d.add(_req("a", PROMPT))
    _run(d)
    ids = list(PROMPT)
    ids[500] = 7  # in block 31
    b = _req("b", ids, now=d.now)
    d.add(b)
    _run(d)
    assert _first_chunk(d, b) == (31 * 16, 1000 - 31 * 16)


def test_running_requests_share_blocks_of_a_common_prefix():
    d = Driver(_sched())
    a = _req("a", PROMPT, out=50)
    d.add(a)
    d.step()  # a's prefill: its 62 full blocks are cached while it decodes
    b = _req("b", PROMPT[:640] + [5] * 100, now=d.now)
    d.add(b)
    d.step()
    check_invariants(d.sched)
    shared = set(a.block_ids) & set(b.block_ids)
    assert len(shared) == 40 and b.block_ids[:40] == a.block_ids[:40]
    assert all(d.sched.pool.device.ref_count[x] == 2 for x in shared)
    _run(d)
    assert all(n == 0 for n in d.sched.pool.device.ref_count)


def test_off_switch_and_policy_defaults():
    d = Driver(_sched(enable_prefix_caching=False))
    d.add(_req("a", PROMPT))
    _run(d)
    b = _req("b", PROMPT, now=d.now)
    d.add(b)
    _run(d)
    assert _first_chunk(d, b) == (0, 1000) and d.sched.prefix is None
    on = {"augserve-slo", "vllm-apc", "continuum"}  # augserve: off, as its paper ran it
    for name in ("vllm", "infercept", "ssjf", "ssjf-infercept", "mars", *on):
        cfg = SchedulerConfig(policy=name)
        assert uses_prefix_caching(cfg) == (name in on), name
        assert uses_prefix_caching(cfg.with_(enable_prefix_caching=True))


def test_eviction_under_pressure_takes_only_cached_free_blocks_oldest_first():
    d = Driver(_sched(num_device_blocks=100))
    a = _req("a", PROMPT)  # 63 blocks; 62 cached after it finishes
    d.add(a)
    _run(d)
    live = _req("live", synthetic_token_ids("x", 0, 300), out=200, now=d.now)
    d.add(live)
    d.step()
    held = list(live.block_ids)
    c = _req("c", synthetic_token_ids("y", 0, 900), now=d.now)  # needs 57 blocks
    d.add(c)
    while not live.is_finished:
        check_invariants(d.sched, d.step(), d.finished)
        if not live.is_finished:
            assert live.block_ids[: len(held)] == held  # never lost a block while it ran
            held = list(live.block_ids)
    _run(d)
    dev = d.sched.pool.device
    assert dev.num_evictions > 0
    # a's tail went first: a repeat still hits a prefix of a's blocks
    again = _req("again", PROMPT, now=d.now)
    d.add(again)
    _run(d)
    start, _ = _first_chunk(d, again)
    assert 0 < start < 992


def test_a_discarded_context_recomputes_only_what_the_cache_lost():
    """INFERCEPT's Discard drops the KV to the prefix cache: on return it hits."""
    sched = _sched("infercept", forced_context_policy=ContextPolicy.DISCARD,
                   enable_prefix_caching=True, lazy_eviction=False)  # fmt: skip
    d = Driver(sched)
    a = Request("a", 0.0, 1000, [Segment(4, 0.05, 10), Segment(3)])  # lengths only
    d.add(a)
    _run(d)
    after = [(c.start_pos, c.num_tokens) for o in d.outputs for c in o.chunks if c.request is a]
    # before the call 1003 tokens were computed: 62 full blocks; 1014 after the return
    assert (992, 22) in after and a.calls[0].policy is ContextPolicy.DISCARD


@pytest.mark.parametrize("policy", ["vllm-apc", "vllm"])
def test_vllm_apc_hits_its_own_blocks_on_return_and_vllm_recomputes(policy):
    d = Driver(_sched(policy))
    a = Request("a", 0.0, 1000, [Segment(4, 0.05, 10), Segment(3)])
    d.add(a)
    _run(d)
    after = [(c.start_pos, c.num_tokens) for o in d.outputs for c in o.chunks if c.request is a]
    assert after[0] == (0, 1000)
    resumed = after[4]  # prefill, 3 decodes, then the first chunk after the return
    assert resumed == ((992, 22) if policy == "vllm-apc" else (0, 1014))


def test_a_cached_prefix_lowers_augserve_arrival_cost():
    d = Driver(_sched())
    d.add(_req("a", PROMPT))
    _run(d)
    cold, warm = _req("cold", PROMPT[::-1], now=d.now), _req("warm", PROMPT, now=d.now)
    d.add(cold)
    d.add(warm)
    policy = d.sched.policy
    assert warm.num_cached_tokens == 992 and cold.num_cached_tokens == 0
    assert policy.cost("warm") < policy.cost("cold")
    assert warm.num_tokens_to_compute == 8
