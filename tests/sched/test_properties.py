"""Random arrivals, iterations, calls, returns and aborts through every policy.

After every step: blocks owned once or free, one state per request, budget kept.
When the load stops every request finishes exactly once and all memory is free.
"""

from driver import Driver, easy_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from augserve.core.config import SchedulerConfig
from augserve.core.request import ContextPolicy, Request, Segment
from augserve.predict.base import NoisyOraclePredictor, OraclePredictor
from augserve.sched.invariants import check_invariants
from augserve.sched.policies import POLICIES
from augserve.sched.scheduler import Scheduler

segments = st.lists(
    st.builds(
        Segment,
        output_len=st.integers(0, 40),
        call_time=st.sampled_from([None, 0.0, 0.005, 0.03, 0.2]),
        return_len=st.integers(0, 40),
    ),
    min_size=1,
    max_size=4,
)
requests = st.tuples(st.integers(1, 300), segments)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), requests),
        st.tuples(st.just("step"), st.integers(1, 5)),
        st.tuples(st.just("abort"), st.integers(0, 1000)),
    ),
    max_size=60,
)
configs = st.fixed_dictionaries(
    {
        "policy": st.sampled_from(sorted(POLICIES)),
        "num_device_blocks": st.integers(20, 80),
        "num_host_blocks": st.sampled_from([0, 8, 64]),
        "max_batch_tokens": st.sampled_from([16, 64, 256]),
        "max_num_seqs": st.sampled_from([4, 256]),
        "lazy_eviction": st.booleans(),
        "forced_context_policy": st.sampled_from([None, *ContextPolicy]),
        "swap_budget_blocks": st.sampled_from([None, 1, 4]),
    }
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, ops, st.booleans())
def test_scheduler_invariants_hold_and_everything_finishes(cfg, operations, noisy):
    config = SchedulerConfig(block_size=16, **cfg)
    predictor = NoisyOraclePredictor(0.5, seed=1) if noisy else OraclePredictor()
    sched = Scheduler(config, easy_profile(), predictor)
    driver = Driver(sched)
    arrived: list[str] = []
    for op, arg in operations:
        if op == "arrive":
            prompt_len, segs = arg
            # a trace's middle segments end in a call; its last one does not
            segs = [Segment(s.output_len, s.call_time or 0.0, s.return_len) for s in segs[:-1]]
            segs.append(Segment(arg[1][-1].output_len))
            rid = f"r{len(arrived)}"
            driver.add(Request(rid, driver.now, prompt_len, segs))
            arrived.append(rid)
        elif op == "step":
            for _ in range(arg):
                out = driver.step()
                check_invariants(sched, out, driver.finished)
        elif arrived:
            rid = arrived[arg % len(arrived)]
            driver._note(sched.abort(rid, driver.now))
            driver.returns.pop(rid, None)
            check_invariants(sched, finished=driver.finished)
    driver.run_until_idle()
    check_invariants(sched, finished=driver.finished)
    finished = [r.request_id for r in driver.finished]
    assert sorted(finished) == sorted(arrived)  # every arrival finished exactly once
    assert sched.pool.num_free_device == config.num_device_blocks
    assert sched.pool.num_free_host == config.num_host_blocks
    for req in driver.finished:
        assert req.finish_time is not None
        if req.finish_reason.value == "stop":
            # finished normally: generated what it planned, returned what the calls gave
            planned = sum(max(1, s.output_len) for s in req.segments)
            assert req.num_generated_tokens == planned
            assert req.num_returned_tokens == sum(s.return_len for s in req.segments[:-1])
            assert all(c.end is not None for c in req.calls)
