"""Continuum: TTL pinning at a call, expiry to the prefix cache, program-level FCFS."""

from __future__ import annotations

from driver import Driver, easy_profile

from augserve.core.config import SchedulerConfig
from augserve.core.request import ContextPolicy, Request, Segment
from augserve.predict.base import OraclePredictor
from augserve.sched.invariants import check_invariants
from augserve.sched.scheduler import Scheduler


def _sched(policy: str = "continuum", **kw) -> Scheduler:
    kw.setdefault("num_device_blocks", 64)
    cfg = SchedulerConfig(policy=policy, block_size=16, **kw)
    return Scheduler(cfg, easy_profile(), OraclePredictor())


def _run_until_call(d: Driver, req: Request) -> None:
    while not req.in_call:
        check_invariants(d.sched, d.step())


def test_a_short_call_is_pinned_for_its_ttl_then_its_kv_may_go_to_the_cache() -> None:
    d = Driver(_sched())
    a = Request("a", 0.0, 200, [Segment(3, 0.5, 4, "edit"), Segment(2)])
    d.add(a)
    _run_until_call(d, a)
    assert a.context_policy is ContextPolicy.PRESERVE
    policy = d.sched.policy
    expiry = policy._expiry["a"]
    assert expiry == a.calls[0].start + 0.5  # no history: the prediction as a point mass
    assert "a" not in d.sched.kv.reclaimable  # pinned: admission cannot take it
    d.now = expiry + 0.01  # the call outlives its TTL (the driver returns it at 0.5)
    d.returns["a"] = (expiry + 10.0, a)
    d.step()
    assert "a" in d.sched.kv.reclaimable  # expired: reclaimable, to the prefix cache
    d.run_until_idle()
    assert a.is_finished


def test_a_call_not_worth_pinning_lets_the_kv_go_at_once() -> None:
    """Pinning a long call of a large context costs more memory-time than it saves."""
    d = Driver(_sched())
    a = Request("a", 0.0, 900, [Segment(3, 500.0, 4, "run"), Segment(2)])
    d.add(a)
    _run_until_call(d, a)
    assert a.context_policy is ContextPolicy.DISCARD
    assert "a" in d.sched.kv.reclaimable


def test_the_ttl_follows_the_tool_s_observed_durations() -> None:
    sched = _sched()
    policy = sched.policy
    req = Request("x", 0.0, 100, [Segment(1, 1.0, 0, "edit")])
    from augserve.core.request import CallRecord

    req.calls.append(CallRecord(start=0.0, tool="edit"))
    req.pred_call_time = 1000.0  # ignored once the tool has a history
    for i, d in enumerate([0.1, 0.2, 0.3, 100.0]):
        done = Request(f"h{i}", 0.0, 10, [Segment(1)])
        done.calls.append(CallRecord(start=0.0, end=d, tool="edit"))
        policy.on_return(done, ContextPolicy.PRESERVE, d)
    assert policy.ttl(req) == 0.3  # covers the fast calls, not the 100 s outlier


def _old_session_finish(policy: str) -> tuple[float, float]:
    d = Driver(_sched(policy, num_device_blocks=40))
    old = Request("old", 0.0, 100, [Segment(2, 1.0, 4, "edit"), Segment(30)])
    d.add(old)
    _run_until_call(d, old)
    d.now += 0.1
    new = [Request(f"n{i}", d.now, 150, [Segment(120)]) for i in range(4)]
    for r in new:
        d.add(r)
    d.run_until_idle()
    assert old.finish_time is not None
    return old.finish_time, max(r.finish_time or 0.0 for r in new)


def test_program_level_fcfs_puts_a_returning_session_before_newer_ones() -> None:
    """The session that came first keeps its turn after its call (vllm-apc re-queues
    it behind the requests that arrived during the call)."""
    old, last_new = _old_session_finish("continuum")
    apc_old, _ = _old_session_finish("vllm-apc")
    assert old < last_new and old < apc_old
