"""The call-handling strategy (`sched/call_handling.py`): chosen once from the policy and the
config, and what each one does to a request's KV at its call and at its return."""

from __future__ import annotations

import pytest
from driver import easy_profile, step_results

from augserve.core.config import SchedulerConfig
from augserve.core.request import ContextPolicy, Request, RequestStatus, Segment
from augserve.predict.base import OraclePredictor
from augserve.sched.call_handling import DiscardAtCall, Fixed, MinWaste, PolicyChooses
from augserve.sched.context_policy import choose_context_policy, min_waste_policy
from augserve.sched.policies import POLICIES
from augserve.sched.scheduler import Scheduler

EXPECTED = {
    "vllm": DiscardAtCall,
    "vllm-apc": DiscardAtCall,
    "ssjf": DiscardAtCall,
    "infercept": MinWaste,
    "ssjf-infercept": MinWaste,
    "mars": MinWaste,
    "augserve": MinWaste,
    "augserve-slo": MinWaste,
    "continuum": PolicyChooses,
}


def _sched(policy: str, **kw: object) -> Scheduler:
    cfg = SchedulerConfig(policy=policy, num_device_blocks=64, num_host_blocks=16, **kw)
    return Scheduler(cfg, easy_profile(), OraclePredictor())


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_each_policy_gets_its_strategy_and_a_forced_policy_fixes_it(name: str) -> None:
    assert type(_sched(name).calls) is EXPECTED[name]
    forced = _sched(name, forced_context_policy=ContextPolicy.SWAP).calls
    # vLLM's discard at the call wins over a forced policy, as before the strategies
    assert type(forced) is (DiscardAtCall if EXPECTED[name] is DiscardAtCall else Fixed)


def test_min_waste_keeps_its_replanner_only_while_reevaluating() -> None:
    on, off = _sched("infercept").calls, _sched("infercept", reevaluate_paused=False).calls
    assert isinstance(on, MinWaste) and on.replanner is not None
    assert isinstance(off, MinWaste) and off.replanner is None


def _to_call(sched: Scheduler, req: Request) -> float:
    sched.add_request(req, 0.0)
    now = 0.0
    for _ in range(50):
        out = sched.schedule(now)
        now += 0.01
        upd = sched.update_from_output(out, step_results(out), now)
        if upd.calls_started:
            assert upd.kv_discarded == ([req.request_id] if req.block_ids == [] else [])
            return now
    raise AssertionError("no call started")


def test_discard_at_call_frees_at_once_and_requeues_on_return() -> None:
    sched = _sched("vllm")
    req = Request("a", 0.0, 40, [Segment(2, 5.0, 3), Segment(2)])
    start = _to_call(sched, req)
    assert req.status is RequestStatus.PAUSED_DISCARDED and not req.block_ids
    assert sched.pool.num_free_device == 64
    sched.resume("a", 3, start + 5.0)
    assert req.queue_time == start + 5.0 and req.status is RequestStatus.WAITING


def test_min_waste_keeps_the_kv_and_the_original_queue_time() -> None:
    sched = _sched("infercept")
    req = Request("a", 0.0, 40, [Segment(2, 5.0, 3), Segment(2)])
    start = _to_call(sched, req)
    assert req.status is RequestStatus.PAUSED_PRESERVED and req.block_ids
    sched.resume("a", 3, start + 5.0)
    assert req.queue_time == 0.0


def test_one_min_waste_choice_for_the_scheduler_and_the_planning_policies() -> None:
    """`min_waste_policy` is the one path: the config's forced policy, else the argmin
    with Swap allowed exactly where the config has host blocks."""
    prof = easy_profile()
    for host in (0, 16):
        cfg = SchedulerConfig(num_device_blocks=64, num_host_blocks=host)
        for ctx, call, other in ((100, 2.0, 500), (100, 0.1, 500), (3000, 9.0, 0)):
            want = choose_context_policy(ctx, call, other, prof, allow_swap=host > 0)
            assert min_waste_policy(cfg, prof, ctx, call, other) is want
        forced = cfg.with_(forced_context_policy=ContextPolicy.PRESERVE)
        assert min_waste_policy(forced, prof, 100, 2.0, 500) is ContextPolicy.PRESERVE


def test_a_resume_with_the_wrong_ids_leaves_the_request_paused() -> None:
    """The old `resume` popped the request before checking the ids: after the
    ValueError it was neither paused nor runnable, and its KV leaked."""
    sched = _sched("infercept")
    req = Request("a", 0.0, 40, [Segment(2, 5.0, 3), Segment(2)])
    start = _to_call(sched, req)
    with pytest.raises(ValueError, match="ids"):
        sched.resume("a", 3, start + 1.0, token_ids=[1, 2])
    assert sched.is_paused("a")
    sched.resume("a", 3, start + 1.0)
    assert sched.has_runnable() and not sched.is_paused("a")
