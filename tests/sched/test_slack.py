"""`augserve-slo`: SLO deadlines, the two-class queue, and what the policy does with them."""

from __future__ import annotations

import math
import random

import pytest
from driver import Driver, easy_profile

from augserve.core.config import SchedulerConfig
from augserve.core.metrics import NORM_FACTOR, SLOConfig
from augserve.core.request import CallRecord, FinishReason, Request, Segment
from augserve.predict.base import OraclePredictor
from augserve.sched.policies import POLICIES, make_policy
from augserve.sched.policies.slack import SlackPolicy
from augserve.sched.ranking import HeapQueue
from augserve.sched.scheduler import Scheduler
from augserve.sched.slo import slo_deadline
from augserve.sched.triage import TriageQueue

# easy_profile: tau_fwd(L) = 0.01 + 0.001 L, decode iteration 0.01 s: norm SLO 0.1 s/token
TARGET = SLOConfig.from_iteration_time(easy_profile().decode_iter_time())


class _Load:
    def running_tokens(self) -> int:
        return 0


def _started(arrival: float, first: float, generated: int, predicted: float) -> Request:
    """A request in its first segment, `generated` tokens out, the last one not yet computed."""
    req = Request("r", arrival_time=arrival, prompt_len=100)
    req.first_token_time = first
    req.num_generated_tokens = req.segment_generated = generated
    req.num_tokens = 100 + generated
    req.num_computed_tokens = req.num_tokens - 1
    req.pred_output_len = predicted
    return req


def test_target_is_the_metric_slo_and_rejects_bad_values() -> None:
    assert TARGET.ttft_slo == 1.0
    assert TARGET.norm_latency_slo == pytest.approx(0.1)
    assert TARGET.norm_latency_slo == NORM_FACTOR * easy_profile().decode_iter_time()
    with pytest.raises(ValueError, match="ttft_slo"):
        SLOConfig(norm_latency_slo=0.1, ttft_slo=0.0)
    with pytest.raises(ValueError, match="norm_latency_slo"):
        SLOConfig(norm_latency_slo=-1.0, ttft_slo=1.0)


def test_the_policy_triages_by_the_metric_slo_and_its_overrides() -> None:
    cfg = SchedulerConfig(policy="augserve-slo")
    policy = SlackPolicy(cfg, easy_profile(), _Load())
    assert policy.target == TARGET
    own = SlackPolicy(cfg.with_(slo_ttft=2.0, slo_norm_latency=0.5), easy_profile(), _Load())
    assert own.target == SLOConfig(norm_latency_slo=0.5, ttft_slo=2.0)


def test_ttft_deadline_leaves_time_for_the_prefill() -> None:
    req = Request("a", arrival_time=2.0, prompt_len=100)
    assert slo_deadline(req, TARGET, easy_profile(), norm=True) == pytest.approx(2.0 + 1 - 0.11)


def test_a_late_first_token_is_lost_for_good_and_a_timely_one_only_by_norm() -> None:
    late = _started(arrival=0.0, first=1.0, generated=5, predicted=30)
    assert slo_deadline(late, TARGET, easy_profile(), norm=True) == -math.inf
    timely = _started(arrival=0.0, first=0.5, generated=5, predicted=30)
    assert slo_deadline(timely, TARGET, easy_profile(), norm=False) == math.inf


def test_norm_deadline_counts_calls_tokens_and_the_time_left() -> None:
    req = _started(arrival=0.0, first=0.5, generated=10, predicted=30)
    # 30 tokens x 0.1 s, minus the rest alone: prefill of 1 token (0.011) + 20 x 0.01
    assert slo_deadline(req, TARGET, easy_profile(), norm=True) == pytest.approx(3.0 - 0.211)
    req.calls.append(CallRecord(start=1.0, end=6.0))  # 5 s of calls do not count
    assert slo_deadline(req, TARGET, easy_profile(), norm=True) == pytest.approx(8.0 - 0.211)
    req.pred_call_time = 2.0  # a call ahead: `ahead` x the rest more tokens to divide by
    got = slo_deadline(req, TARGET, easy_profile(), norm=True, ahead=1.0)
    assert got == pytest.approx(5.0 + 0.1 * 50 - 0.211)


def test_triage_queue_scans_in_the_order_of_a_sort_at_every_time() -> None:
    rng = random.Random(3)
    value: dict[str, float] = {}
    due: dict[str, float] = {}
    inner = lambda r, now: (value[r.request_id], r.request_id)  # noqa: E731
    q = TriageQueue(lambda r: due[r.request_id], lambda: HeapQueue(inner))
    live: dict[str, Request] = {}
    now = 0.0
    for step in range(600):
        rid = f"r{rng.randrange(40):02d}"
        op = rng.random()
        if op < 0.5:
            req = live.get(rid) or Request(rid, arrival_time=0.0, prompt_len=1)
            value[rid] = rng.choice([1.0, 2.0, 3.0])
            due[rid] = now + rng.choice([-1.0, 0.0, 0.3, 1.0, 5.0])
            live[rid] = req
            q.add(req, now)
        elif op < 0.7 and rid in live:
            q.remove(live.pop(rid))
        else:
            now += rng.choice([0.0, 0.1, 0.5])
        want = sorted(live.values(), key=lambda r: (now >= due[r.request_id], *inner(r, now)))
        assert q.ordered(now) == want, step
        assert len(q) == len(live)
    assert q.moved > 0  # requests did cross their deadline while queued


def test_skip_below_passes_over_a_whole_class() -> None:
    due = {"a": 10.0, "b": 0.0, "c": 0.0}
    q = TriageQueue(lambda r: due[r.request_id], lambda: HeapQueue(lambda r, t: (r.request_id,)))
    for rid in due:
        q.add(Request(rid, arrival_time=0.0, prompt_len=1), 1.0)
    scan = q.scan(1.0)
    scan.skip_below((1, "c"))
    top = scan.peek()
    assert top is not None and top[0] == (1, "c")


def test_a_feasible_request_outranks_a_lost_one_that_augserve_puts_first() -> None:
    cfg = SchedulerConfig(policy="augserve-slo", num_device_blocks=64, max_batch_tokens=256)
    ours = make_policy(cfg, easy_profile(), _Load())
    theirs = make_policy(cfg.with_(policy="augserve"), easy_profile(), _Load())
    old = Request("old", arrival_time=0.0, prompt_len=10)  # cheap, waited long: lost
    new = Request("new", arrival_time=1.5, prompt_len=100)  # dearer, still in time
    for req in (old, new):
        req.pred_output_len = 10.0
        ours.on_arrival(req, req.arrival_time)
        theirs.on_arrival(req, req.arrival_time)
    assert isinstance(ours, SlackPolicy)
    assert ours.is_lost(old, 1.6) and not ours.is_lost(new, 1.6)
    assert theirs.key(old, 1.6) < theirs.key(new, 1.6)
    assert ours.key(new, 1.6) < ours.key(old, 1.6)


def _burst(policy: str) -> list[Request]:
    """20 equal requests, one every 0.1 s, onto a server that runs one at a time (0.21 s
    each): twice its capacity. Every request finishes; returns them."""
    cfg = SchedulerConfig(policy=policy, num_device_blocks=64, max_batch_tokens=256,
                          max_num_seqs=1)  # fmt: skip
    driver = Driver(Scheduler(cfg, easy_profile(), OraclePredictor()), iter_time=0.01)
    pending = [Request(f"r{i:02d}", 0.1 * i, 10, [Segment(20)]) for i in range(20)]
    reqs = list(pending)
    while pending or driver.sched.num_live:
        while pending and pending[0].arrival_time <= driver.now + 1e-9:
            driver.add(pending.pop(0))
        driver.step()
    assert sorted(r.request_id for r in driver.finished) == [r.request_id for r in reqs]
    assert all(r.finish_reason is FinishReason.STOP for r in reqs)
    return reqs


def test_under_overload_more_requests_meet_ttft_and_the_lost_still_finish() -> None:
    def in_time(reqs: list[Request]) -> int:
        return sum(r.first_token_time is not None and r.first_token_time - r.arrival_time < 1
                   for r in reqs)  # fmt: skip

    ours, theirs = in_time(_burst("augserve-slo")), in_time(_burst("augserve"))
    assert theirs <= 10  # AugServe's aging serves the oldest first: FCFS-like, all late
    assert ours >= theirs + 3


def test_registered() -> None:
    assert POLICIES["augserve-slo"] is SlackPolicy


def test_the_slo_it_triages_by_is_the_deployments_when_given() -> None:
    """`slo_ttft` / `slo_norm_latency` replace the paper's SLO (TTFT 1 s, 10 iterations):
    a request that has waited 0.6 s is lost under a 0.5 s TTFT, not under the default."""
    cfg = SchedulerConfig(policy="augserve-slo", num_device_blocks=64, max_batch_tokens=256)
    paper = make_policy(cfg, easy_profile(), _Load())
    told = make_policy(cfg.with_(slo_ttft=0.5, slo_norm_latency=0.2), easy_profile(), _Load())
    assert isinstance(paper, SlackPolicy) and isinstance(told, SlackPolicy)
    assert paper.target.ttft_slo == 1.0
    assert paper.target.norm_latency_slo == pytest.approx(10 * paper.latency.decode_iter_time())
    assert (told.target.ttft_slo, told.target.norm_latency_slo) == (0.5, 0.2)
    req = Request("r", arrival_time=0.0, prompt_len=10)
    req.pred_output_len = 10.0
    assert told.is_lost(req, 0.6) and not paper.is_lost(req, 0.6)
    for field in ("slo_ttft", "slo_norm_latency"):
        with pytest.raises(ValueError, match=field):
            SchedulerConfig(**{field: 0.0})
