"""What each policy must do (docs/paper.md section 6) and the head-of-line scenario."""

import pytest
from driver import Driver, easy_profile

from augserve.core.config import SchedulerConfig
from augserve.core.request import ContextPolicy, Request, RequestStatus, Segment
from augserve.predict.base import OraclePredictor
from augserve.sched.scheduler import Scheduler


def _policy(name: str):
    return _sched(name).policy


def _sched(policy: str, **kw) -> Scheduler:
    cfg = SchedulerConfig(policy=policy, block_size=16, **kw)
    return Scheduler(cfg, easy_profile(), OraclePredictor())


def test_vllm_discards_at_every_call_and_requeues_at_the_back():
    sched = _sched("vllm", num_device_blocks=64, num_host_blocks=64)
    d = Driver(sched)
    a = Request("a", 0.0, 40, [Segment(3, 0.05, 5), Segment(3, 0.05, 5), Segment(2)])
    d.add(a)
    d.run_until_idle()
    assert [c.policy for c in a.calls] == [ContextPolicy.DISCARD] * 2
    # after each return the whole context (prompt + generated + returned) is recomputed
    starts = [(c.start_pos, c.num_tokens) for o in d.outputs for c in o.chunks if c.request is a]
    assert (0, 40 + 3 + 5) in starts
    assert (0, 40 + 3 + 5 + 3 + 5) in starts
    assert a.queue_time == a.calls[-1].end  # re-queued as a new request at its return


def test_vllm_returned_request_goes_behind_earlier_waiting_ones():
    pol = _policy("vllm")
    old = Request("old", 0.0, 10)
    new = Request("new", 5.0, 10)
    old.queue_time = 9.0  # returned from its call at t = 9
    assert pol.order([old, new], now=10.0) == [new, old]


def test_infercept_keeps_original_arrival_order_after_a_return():
    pol = _policy("infercept")
    old = Request("old", 0.0, 10)
    new = Request("new", 5.0, 10)
    new.status = RequestStatus.RUNNING
    old.last_scheduled_time = 9.0  # returned at t = 9: still ranks by arrival
    assert pol.order([new, old], now=10.0) == [old, new]


def test_infercept_picks_min_waste_policy_per_call():
    sched = _sched("infercept", num_device_blocks=64, num_host_blocks=64)
    d = Driver(sched)
    short = Request("short", 0.0, 100, [Segment(2, 0.001, 1), Segment(1)])
    long = Request("long", 0.0, 100, [Segment(2, 5.0, 1), Segment(1)])
    d.add(short)
    d.add(long)
    d.run_until_idle()
    assert short.calls[0].policy is ContextPolicy.PRESERVE  # a 1 ms call: keep the KV
    assert long.context_policy is ContextPolicy.SWAP  # a 5 s call: swap is cheapest


def test_ssjf_orders_by_predicted_remaining_output():
    pol = _policy("ssjf")
    reqs = []
    for i, (out, done) in enumerate([(100, 0), (30, 0), (100, 90), (50, 0)]):
        r = Request(f"r{i}", float(i), 10)
        r.pred_output_len, r.segment_generated = float(out), done
        reqs.append(r)
    # remaining: 100, 30, 10, 50
    assert [r.request_id for r in pol.order(reqs, 0.0)] == ["r2", "r1", "r3", "r0"]


def test_mars_keeps_fcfs_among_running_and_sorts_waiting_by_score():
    pol = _policy("mars")
    run_late = Request("run_late", 2.0, 10)
    run_early = Request("run_early", 1.0, 500)
    for r in (run_late, run_early):
        r.status = RequestStatus.RUNNING
    cheap = Request("cheap", 3.0, 10)
    dear = Request("dear", 0.0, 2000)
    for r in (run_late, run_early, cheap, dear):
        r.pred_output_len = 10.0
        pol.on_arrival(r, 0.0)
    assert pol.score("cheap") < pol.score("dear")
    order = pol.order([cheap, run_late, dear, run_early], 0.0)
    assert [r.request_id for r in order] == ["run_early", "run_late", "cheap", "dear"]


@pytest.mark.parametrize("baseline", ["vllm", "infercept"])
def test_head_of_line_short_request_served_sooner_by_augserve(baseline):
    def short_ttft(policy: str) -> float:
        sched = _sched(policy, num_device_blocks=160, num_host_blocks=0, max_batch_tokens=128)
        d = Driver(sched)
        for i in range(6):  # long requests that pause in calls and come back
            d.add(Request(f"long{i}", 0.0, 300, [Segment(40, 0.3, 60), Segment(60)]))
        for _ in range(5):
            d.step()
        short = Request("short", d.now, 16, [Segment(4)])
        d.add(short)
        d.run_until_idle()
        assert short.first_token_time is not None
        return short.first_token_time - short.arrival_time

    assert short_ttft("augserve") < 0.5 * short_ttft(baseline)
