"""Random request streams sharing prefixes, through every policy with the prefix cache.

After every step the invariants hold (`sched/invariants.py`: each device block's
reference count is its number of holders, the unheld blocks are exactly the
free ones, a cached block holds the tokens its hash names). When the load stops
every request has finished, no block leaks, and the cache only ever holds free
blocks that a later allocation may evict.
"""

from __future__ import annotations

from driver import Driver, easy_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from augserve.core.config import SchedulerConfig
from augserve.core.request import Request, Segment
from augserve.core.token_ids import synthetic_token_ids
from augserve.predict.base import OraclePredictor
from augserve.sched.invariants import check_invariants
from augserve.sched.policies import POLICIES
from augserve.sched.scheduler import Scheduler

segments = st.lists(
    st.builds(
        Segment,
        output_len=st.integers(0, 30),
        call_time=st.sampled_from([0.0, 0.01, 0.05, 0.3]),
        return_len=st.integers(0, 40),
    ),
    min_size=1,
    max_size=4,
)
# (session, prompt length, segments, ids or lengths only)
requests = st.tuples(st.integers(0, 2), st.integers(1, 400), segments, st.booleans())
ops = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), requests),
        st.tuples(st.just("step"), st.integers(1, 6)),
        st.tuples(st.just("abort"), st.integers(0, 1000)),
    ),
    max_size=50,
)
configs = st.fixed_dictionaries(
    {
        "policy": st.sampled_from(sorted(POLICIES)),
        "num_device_blocks": st.integers(30, 90),
        "num_host_blocks": st.sampled_from([0, 16]),
        "max_batch_tokens": st.sampled_from([32, 256]),
        "lazy_eviction": st.booleans(),
    }
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, ops)
def test_prefix_cache_never_leaks_and_keeps_the_invariants(cfg, operations):
    config = SchedulerConfig(block_size=16, enable_prefix_caching=True, **cfg)
    sched = Scheduler(config, easy_profile(), OraclePredictor())
    driver = Driver(sched)
    arrived: list[str] = []
    for op, arg in operations:
        if op == "arrive":
            session, prompt_len, segs, with_ids = arg
            segs = [Segment(s.output_len, s.call_time, s.return_len) for s in segs[:-1]]
            segs.append(Segment(arg[2][-1].output_len))
            rid = f"r{len(arrived)}"
            ids = synthetic_token_ids(f"s{session}", 0, prompt_len) if with_ids else None
            req = Request(rid, driver.now, prompt_len, segs, token_ids=ids,
                          session_id=f"s{session}")  # fmt: skip
            driver.add(req)
            arrived.append(rid)
        elif op == "step":
            for _ in range(arg):
                check_invariants(sched, driver.step(), driver.finished)
        elif arrived:
            rid = arrived[arg % len(arrived)]
            driver._note(sched.abort(rid, driver.now))
            driver.returns.pop(rid, None)
            check_invariants(sched, finished=driver.finished)
    driver.run_until_idle()
    check_invariants(sched, finished=driver.finished)
    assert sorted(r.request_id for r in driver.finished) == sorted(arrived)
    dev = sched.pool.device
    assert all(n == 0 for n in dev.ref_count)  # no block leaked
    assert sched.pool.num_free_device == config.num_device_blocks
    assert sched.pool.num_free_host == config.num_host_blocks
    assert dev.num_cached_free == len(dev.cached)  # what the cache holds is all free


def test_requests_of_one_session_hit_each_other():
    """A sanity check that the property test's streams do share: the second turn of a
    session (its prompt the first turn's context) hits the first's blocks."""
    sched = Scheduler(
        SchedulerConfig(policy="vllm-apc", block_size=16, num_device_blocks=64),
        easy_profile(),
        OraclePredictor(),
    )
    d = Driver(sched)
    first = Request("t0", 0.0, 100, [Segment(20)], token_ids=synthetic_token_ids("s", 0, 100),
                    session_id="s")  # fmt: skip
    d.add(first)
    d.run_until_idle()
    assert first.token_ids is not None and first.token_ids[100:] == [7] * 20  # the driver's
    ids = synthetic_token_ids("s", 0, 150)
    d.add(Request("t1", d.now, 150, [Segment(2)], token_ids=ids, session_id="s"))
    d.run_until_idle()
    assert sched.prefix is not None and sched.prefix.stats.hits == 96  # the prompt's 6 blocks
