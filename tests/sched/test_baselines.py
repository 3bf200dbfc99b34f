"""Each aligned baseline against values computed by hand from the reference code's formulas.

- SSJF as the paper ran it (vLLM's call handling) and `ssjf-infercept`;
- MARS: mars-codebase `vllm/core/policy.py` (V2.get_priority,
  calculate_memory_time_blocks) and the starvation rule of `vllm/sequence.py`;
- INFERCEPT: WukLab/InferCept `_schedule_chunk_and_fill`, the policy of a paused
  request chosen again every iteration with the call's remaining time;
- AugServe: the cost of what remains of the segment (docs/paper.md section 3, revised).
"""

from __future__ import annotations

import pytest
from driver import Driver, easy_profile

from augserve.core.config import SchedulerConfig
from augserve.core.request import ContextPolicy, Request, RequestStatus, Segment
from augserve.predict.base import OraclePredictor
from augserve.sched.policies.mars import MARSPolicy
from augserve.sched.policies.mars_rank import BoostClock, Round, ScoreParams, block_triangle, score
from augserve.sched.scheduler import Scheduler

P, D, S = ContextPolicy.PRESERVE, ContextPolicy.DISCARD, ContextPolicy.SWAP


def _sched(policy: str, **kw) -> Scheduler:
    cfg = SchedulerConfig(policy=policy, block_size=16, **kw)
    return Scheduler(cfg, easy_profile(), OraclePredictor())


# --- SSJF -------------------------------------------------------------------------------
def test_ssjf_frees_kv_at_the_call_and_recomputes_on_return():
    sched = _sched("ssjf", num_device_blocks=64, num_host_blocks=64)
    d = Driver(sched)
    a = Request("a", 0.0, 40, [Segment(3, 0.05, 5), Segment(2)])
    d.add(a)
    d.run_until_idle()
    assert a.calls[0].policy is D  # KV freed when the call started, whatever its length
    starts = [(c.start_pos, c.num_tokens) for o in d.outputs for c in o.chunks if c.request is a]
    assert (0, 40 + 3 + 5) in starts  # the whole context recomputed with the returned tokens
    assert a.queue_time == a.calls[0].end  # it re-enters as vLLM's new request does


def test_ssjf_reranks_a_returned_request_by_its_new_segment():
    pol = _sched("ssjf").policy
    back = Request("back", 0.0, 10)  # returned at t = 9 with 5 tokens to go
    back.queue_time, back.pred_output_len = 9.0, 5.0
    new = Request("new", 5.0, 10)
    new.pred_output_len = 50.0
    assert pol.order([new, back], 10.0) == [back, new]


def test_ssjf_infercept_keeps_the_kv_of_a_short_call():
    sched = _sched("ssjf-infercept", num_device_blocks=64, num_host_blocks=64)
    d = Driver(sched)
    a = Request("a", 0.0, 40, [Segment(3, 0.001, 5), Segment(2)])
    d.add(a)
    d.run_until_idle()
    assert a.calls[0].policy is P  # min waste: a 1 ms call keeps its KV
    assert a.queue_time == 0.0


# --- MARS ---------------------------------------------------------------------------------
V2 = ScoreParams(block_triangle=True, tau_iter=0.01, swap_rate=2.0)


def test_mars_block_triangle_by_hand():
    f_s = (0.1 * 384 + 10) / 1000  # 0.0484 s
    # 3 blocks of 64 tokens in chunks of 300: n = ceil(192 / 300) = 1
    assert block_triangle(3, 300) == pytest.approx(f_s * 2 * 1 / 2 * 300)  # 14.52
    # 5 blocks: n = ceil(320 / 300) = 2: f_s * 3 * 2 / 2 * 300
    assert block_triangle(5, 300) == pytest.approx(43.56)
    # chunk 1 (a running batch of 383+ tokens): one token per iteration, n = 192
    assert block_triangle(3, 1) == pytest.approx(f_s * 193 * 192 / 2)


@pytest.mark.parametrize(
    ("policy", "chunk", "expected"),
    [
        (P, 300, 14.52 + 3 * 64 * 2.0 + 14.52),  # mt(b) + 64 b tau_call + mt(a)
        (D, 300, 14.52 + 43.56),  # mt(b) + mt(b + a)
        (S, 300, 14.52 + 2.25 + 0.1 * 2.0 + 2.25 + 14.52),  # swap = 3 (3 / 2) / 2
        (P, 1, 0.0484 * 193 * 96 + 384.0 + 0.0484 * 129 * 64),
    ],
)
def test_mars_v2_score_by_hand(policy, chunk, expected):
    # before = ceil((100 + 30) / 64) = 3 blocks, after = ceil((30 + 40) / 64) = 2 blocks
    assert score(Round(3, 2, policy, 2.0, False), chunk, V2) == pytest.approx(expected)


def test_mars_rounds_and_running_batch_from_the_scheduler():
    sched = _sched("mars", num_device_blocks=256, num_host_blocks=0)
    pol = sched.policy
    assert isinstance(pol, MARSPolicy)
    req = Request("r", 0.0, 100, [Segment(30, 0.001, 40), Segment(5)])
    sched.add_request(req, 0.0)
    r = pol._round["r"]
    # before counts the original prompt and the interval; after the interval and the return
    assert (r.before, r.after, r.call, r.complete) == (3, 2, 0.001, False)
    assert r.policy is P  # a 1 ms call: min waste keeps the KV
    assert pol.chunk() == 384  # nothing running yet
    sched.schedule(0.0)  # the 100-token prompt is scheduled: it runs, 101 - 100 = 1 to go
    assert sched.running_batch() == 0  # counted before packing: still waiting then
    sched.schedule(0.1)
    assert sched.running_batch() == 100 and pol.chunk() == 284


def test_mars_after_without_the_returned_tokens_is_the_old_reading():
    sched = _sched("mars", mars_after_returned=False)
    req = Request("r", 0.0, 100, [Segment(30, 0.001, 40), Segment(5)])
    sched.add_request(req, 0.0)
    assert sched.policy._round["r"].after == 1  # ceil(30 / 64)


def test_mars_boost_waits_101_skips_and_never_passes_running_requests():
    clock = BoostClock(limit=100, quantum=100_000)
    clock.enter("x", 1)  # waiting from iteration 1, counted at its end
    boosted = [k for k in range(1, 300) if clock.is_boosted("x", k)]
    # counts 1..100 at the ends of iterations 1..100; the sort of 101 gives the quantum;
    # ahead from 102 on
    assert boosted[0] == 102 and boosted[-1] == 299
    clock.leave("x", 150)  # scheduled while boosted: the quantum runs on while it runs
    assert clock.running_until["x"] == 101 + 100_000
    clock.enter("x", 160)  # preempted back to waiting: still boosted
    assert clock.is_boosted("x", 160)
    clock.reset("x")  # a call resets everything
    assert not clock.is_boosted("x", 161)

    pol = _sched("mars").policy
    run = Request("run", 5.0, 10)
    run.status = RequestStatus.RUNNING
    wait = Request("wait", 0.0, 10)
    wait.first_scheduled_time = 0.0
    for r in (run, wait):
        r.pred_output_len = 10.0
        pol.on_arrival(r, 0.0)
    pol.boost.enter("wait", 1)
    pol.boost.done = 200  # iteration 201: "wait" is boosted
    assert pol.boost.is_boosted("wait", 201)
    assert pol.order([wait, run], 0.0) == [run, wait]  # running requests keep the front


def _cheap_stream(d: Driver, sched: Scheduler, steps: int, big: Request) -> int:
    """Step with two fresh one-token requests always waiting (scores below big's);
    returns how many iterations passed without big."""
    skipped = 0
    for i in range(steps):
        while sched.num_live < 4:
            d.add(Request(f"n{i}-{sched.num_live}", d.now, 8, [Segment(1)]))
        out = d.step()
        if any(c.request is big for c in out.chunks):
            return skipped
        skipped += 1
    return skipped


def test_mars_never_boosts_a_request_that_has_not_run():
    # V2 counts skips only once `time_before_processing` is set (the first schedule)
    sched = _sched("mars", num_device_blocks=256, max_batch_tokens=64, max_num_seqs=2)
    d = Driver(sched)
    big = Request("big", 0.0, 600, [Segment(20)])  # 10 blocks: every newcomer scores lower
    d.add(big)
    assert _cheap_stream(d, sched, 400, big) == 400
    assert big.first_scheduled_time is None


def test_mars_unstarves_a_request_that_ran_after_101_skips():
    sched = _sched(
        "mars",
        num_device_blocks=256,
        max_batch_tokens=64,
        max_num_seqs=2,
        forced_context_policy=ContextPolicy.DISCARD,
        lazy_eviction=False,
    )
    d = Driver(sched)
    # "big" runs first, calls a tool (its context discarded) and comes back waiting
    big = Request("big", 0.0, 600, [Segment(1, 0.05, 0), Segment(200)])  # 13 blocks
    d.add(big)
    while not big.in_call:  # a chunked prefill of 600 tokens, then the call
        d.step()
    steps = _cheap_stream(d, sched, 400, big)
    assert big.calls[0].policy is D and big.first_scheduled_time == 0.0
    back = round((big.calls[0].end - big.calls[0].start) / d.iter_time)  # its call
    # skipped 100 times after its return (count 100), then the sort of the next
    # iteration gives it the quantum (skipped once more), then it leads the waiting
    assert steps - back == 101


# --- INFERCEPT: the paused request's policy, every iteration ------------------------------
@pytest.mark.parametrize("reevaluate", [True, False])
def test_infercept_rechooses_the_policy_with_the_remaining_call_time(reevaluate):
    sched = _sched(
        "infercept", num_device_blocks=64, num_host_blocks=64, reevaluate_paused=reevaluate
    )
    d = Driver(sched)
    a = Request("a", 0.0, 99, [Segment(1, 2.0, 0), Segment(1)])
    d.add(a)
    d.step()  # prefill 99 tokens and sample 1: the call starts at t = 0.01
    assert a.in_call and a.context_policy is S
    # 100 tokens: Waste_P = 100 x remaining, Waste_S = 2 x 0.1 s x 10 tokens = 2: Preserve
    # wins once less than 0.02 s of the 2 s call remain, i.e. after t = 1.99
    sched.schedule(1.98)
    assert a.context_policy is S and "a" in sched.kv.reclaimable
    sched.schedule(1.995)
    if reevaluate:
        assert a.context_policy is P and "a" not in sched.kv.reclaimable
    else:
        assert a.context_policy is S and "a" in sched.kv.reclaimable


# --- AugServe: the remaining cost ------------------------------------------------------------
def test_augserve_cost_covers_what_remains_of_the_segment():
    sched = _sched("augserve", num_device_blocks=64, num_host_blocks=64)
    pol = sched.policy
    r = Request("r", 0.0, 100, [Segment(10, 2.0, 20), Segment(5)])
    sched.add_request(r, 0.0)
    # arrival: C_prefill(100) + C_decode(100, 10) + C_call(Swap, 110) = 11 + 10.55 + 12.1
    assert pol.cost("r") == pytest.approx(33.65)
    r.num_tokens, r.segment_generated = 104, 4  # 4 tokens in: the prefill term is done
    # C_decode(104, 6) + C_call = 0.01 (6 x 104 + 21) + 12.1 (planned once per segment)
    assert pol.cost("r") == pytest.approx(6.45 + 12.1)
    segment = _sched("augserve", num_device_blocks=64, num_host_blocks=64, segment_cost=True)
    r2 = Request("r", 0.0, 100, [Segment(10, 2.0, 20), Segment(5)])
    segment.add_request(r2, 0.0)
    r2.num_tokens, r2.segment_generated = 104, 4
    assert segment.policy.cost("r") == pytest.approx(33.65)  # Algorithm 1: fixed


def test_dynamic_budget_never_exceeds_t_max_by_default():
    sched = _sched("augserve", num_device_blocks=64, max_batch_tokens=200)
    assert sched.token_budget() == 200  # 1024 free tokens, clipped to 1.0 x T_max
