"""The simulator: event times computed by hand, determinism, accounting, invariants."""

from __future__ import annotations

import pytest

from augserve.core.config import SchedulerConfig, scheduler_config_for
from augserve.core.latency import LatencyProfile
from augserve.core.request import ContextPolicy, Request, RequestStatus, Segment
from augserve.predict.base import make_predictor
from augserve.sched.output import ScheduledChunk, SchedulerOutput
from augserve.sim.simulator import Simulator, simulate

# c0 = 10 ms per iteration, 1 ms per prefill token, everything else free.
EASY = LatencyProfile(
    name="easy",
    c0=0.010,
    c_prefill=0.001,
    c_attn=0.0,
    c_decode=0.0,
    c_ctx=0.0,
    kv_bytes=1,
    device_kv_bytes=16 * 1000,
    host_kv_bytes=16 * 1000,
    swap_bandwidth=1000.0,  # 1000 tokens/s: a 16-token block takes 16 ms
    max_batch_tokens=100,
)

POLICIES = ("vllm", "infercept", "ssjf", "mars", "augserve")


def _config(policy: str, **kw: object) -> SchedulerConfig:
    return scheduler_config_for(EASY, policy, **kw)


def _req_a() -> Request:
    # prompt 10; generate 2, call 0.5 s returning 3 tokens; generate 2, finish.
    return Request("a", 0.0, 10, [Segment(2, 0.5, 3), Segment(2)])


def _req_b() -> Request:
    return Request("b", 0.005, 5, [Segment(1)])


@pytest.mark.parametrize("policy", ["infercept", "ssjf-infercept", "mars", "augserve"])
def test_one_request_one_call_by_hand(policy: str) -> None:
    a = _req_a()
    cfg = _config(policy, forced_context_policy=ContextPolicy.PRESERVE)
    res = simulate([a], EASY, cfg, window=10.0, drain=0.0, predictor=make_predictor("oracle"))
    # t=0: prefill 10 tokens: 10 ms + 10 ms -> first token at 0.020
    assert a.first_token_time == pytest.approx(0.020)
    # decode 1 token (10 ms): second token at 0.030 ends the segment: call 0.030 -> 0.530
    assert a.calls[0].start == pytest.approx(0.030)
    assert a.calls[0].end == pytest.approx(0.530)
    assert a.calls[0].policy is ContextPolicy.PRESERVE
    # resume: prefill the last sampled token + 3 returned = 4 tokens: 14 ms -> 0.544
    # decode 1 token: 10 ms -> finish at 0.554
    assert a.finish_time == pytest.approx(0.554)
    assert a.status is RequestStatus.FINISHED_STOPPED
    assert a.num_generated_tokens == 4 and a.num_returned_tokens == 3
    assert a.exec_time == pytest.approx(0.020 + 0.010 + 0.014 + 0.010)
    assert res.stats.iterations == 4
    assert res.stats.busy_time == pytest.approx(0.054)
    assert res.finished == [a] and not res.unfinished


def test_two_requests_share_an_iteration_and_idle_jump() -> None:
    a, b = _req_a(), _req_b()
    cfg = _config("infercept", forced_context_policy=ContextPolicy.PRESERVE)
    res = simulate([b, a], EASY, cfg, window=10.0, predictor=make_predictor("oracle"))
    # b arrives at 0.005 during a's prefill; it joins the batch at 0.020:
    # a decodes (10 ms base) + b prefills 5 tokens (5 ms) -> both end at 0.035
    assert a.first_token_time == pytest.approx(0.020)
    assert b.first_scheduled_time == pytest.approx(0.020)
    assert b.first_token_time == pytest.approx(0.035)
    assert b.finish_time == pytest.approx(0.035)
    assert a.calls[0].start == pytest.approx(0.035)
    # nothing runnable: the clock jumps to a's return at 0.535; 4-token prefill, 1 decode
    assert a.calls[0].end == pytest.approx(0.535)
    assert a.finish_time == pytest.approx(0.535 + 0.014 + 0.010)
    assert res.stats.iterations == 4
    assert res.stats.end_time == pytest.approx(0.559)


def test_vllm_recomputes_the_whole_context_after_a_call() -> None:
    a = _req_a()
    simulate([a], EASY, _config("vllm"), window=10.0, predictor=make_predictor("oracle"))
    assert a.calls[0].policy is ContextPolicy.DISCARD
    # on return: recompute 12 tokens of context + 3 returned = 15 tokens: 25 ms
    assert a.finish_time == pytest.approx(0.530 + 0.025 + 0.010)


def test_iteration_time_adds_only_the_swap_beyond_compute() -> None:
    sim = Simulator(EASY, _config("infercept"))
    req = Request("x", 0.0, 10)
    out = SchedulerOutput(now=0.0, chunks=[ScheduledChunk(req, 10, 0, True, [0])])
    assert sim.iteration_time(out) == pytest.approx(0.020)  # no swap
    out.swap_out = [(0, 0)]  # 16 tokens at 1000 tokens/s = 16 ms < 20 ms compute: hidden
    assert sim.iteration_time(out) == pytest.approx(0.020)
    out.swap_in = [(1, 1), (2, 2)]  # 48 tokens: 48 ms, 28 ms beyond compute
    assert sim.iteration_time(out) == pytest.approx(0.048)
    assert sim.stats.swap_stall_time == pytest.approx(0.028)
    only_swap = SchedulerOutput(now=0.0, swap_out=[(0, 0)])
    assert sim.iteration_time(only_swap) == pytest.approx(0.016)


def test_window_stops_arrivals_and_serving() -> None:
    a = _req_a()
    late = Request("late", 1.5, 4, [Segment(3)])
    res = simulate([a, late], EASY, _config("infercept"), window=0.3)
    assert res.not_arrived == [late] and late.status is RequestStatus.WAITING
    assert res.unfinished == [a] and a.in_call  # its call returns after the window
    assert res.stats.end_time == pytest.approx(0.3)
    # with a drain, a finishes; the late request still never arrives
    a2 = _req_a()
    res2 = simulate(
        [a2, Request("late", 1.5, 4, [Segment(3)])],
        EASY,
        _config("infercept"),
        window=0.3,
        drain=5.0,
    )
    assert res2.finished == [a2] and len(res2.not_arrived) == 1


def test_zero_output_segment_still_samples_one_token() -> None:
    r = Request("z", 0.0, 4, [Segment(0, 0.1, 2), Segment(0)])
    simulate([r], EASY, _config("infercept"), window=5.0, predictor=make_predictor("oracle"))
    assert r.status is RequestStatus.FINISHED_STOPPED
    assert r.num_generated_tokens == 2


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="window"):
        simulate([], EASY, _config("vllm"), window=0.0)
    with pytest.raises(ValueError, match="drain"):
        simulate([], EASY, _config("vllm"), window=1.0, drain=-1.0)


def test_config_comes_from_the_profile() -> None:
    cfg = scheduler_config_for(EASY, "ssjf", block_size=16, beta=None, max_batch_tokens=64)
    assert cfg.num_device_blocks == 1000 and cfg.num_host_blocks == 1000
    assert cfg.max_batch_tokens == 64 and cfg.max_num_seqs == EASY.max_num_seqs
    assert cfg.beta == SchedulerConfig().beta
