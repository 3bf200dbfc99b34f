"""Progress under overload (`sched/progress.py`): every policy finishes every request
and the recompute stays bounded, however the pool is overloaded."""

from driver import Driver, easy_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from augserve.core.config import SchedulerConfig
from augserve.core.request import Request, Segment
from augserve.predict.base import OraclePredictor
from augserve.predict.online import OnlinePredictor
from augserve.sched.invariants import check_invariants
from augserve.sched.policies import POLICIES
from augserve.sched.scheduler import Scheduler

# recomputed tokens per token served, the bound the rules keep (docs/scheduler.md
# "Progress under overload"): in any overload the property below draws (pools of 12-96
# blocks, where one request may fill a third of the pool) the worst seen is ~4.8; in the
# issue's burst (many requests per pool, as served) about 1-2
RECOMPUTE_BOUND = 6.0
BURST_BOUND = 3.0


def run_burst(sched: Scheduler, reqs: list[Request], check: bool = False) -> Driver:
    driver = Driver(sched)
    for r in reqs:
        driver.add(r)
    if check:
        for _ in range(200):
            check_invariants(sched, driver.step(), driver.finished)
    driver.run_until_idle(max_steps=200_000)
    return driver


def served_tokens(driver: Driver) -> int:
    return sum(r.num_tokens for r in driver.finished)


def burst(n: int, prompt: int, out: int) -> list[Request]:
    return [Request(f"r{i}", 0.0, prompt, [Segment(out)]) for i in range(n)]


def test_the_issue_burst_no_longer_thrashes():
    """60 requests of 400 tokens on 512 blocks (the server livelock of issue 34): with
    the online predictor's 64-token prior, AugServe's ranking recomputed 10x the tokens
    it served; the progress rules keep it under the bound, and under 3x vLLM's work."""
    work = {}
    for policy in ("vllm", "augserve"):
        cfg = SchedulerConfig(policy=policy, num_device_blocks=512, max_batch_tokens=2048)
        sched = Scheduler(cfg, easy_profile(), OnlinePredictor())
        driver = run_burst(sched, burst(60, 40, 400), check=True)
        assert len(driver.finished) == 60
        stats = sched.stats()
        assert stats.recomputed_tokens <= BURST_BOUND * served_tokens(driver)
        work[policy] = served_tokens(driver) + stats.recomputed_tokens
    assert work["augserve"] <= 3 * work["vllm"]


segments = st.lists(
    st.tuples(st.integers(1, 120), st.sampled_from([None, 0.0, 0.02, 0.3]), st.integers(0, 30)),
    min_size=1,
    max_size=3,
)
overloads = st.fixed_dictionaries(
    {
        "policy": st.sampled_from(sorted(POLICIES)),
        "num_device_blocks": st.integers(12, 96),
        "num_host_blocks": st.sampled_from([0, 16]),
        "max_batch_tokens": st.sampled_from([32, 256, 2048]),
        "enable_prefix_caching": st.sampled_from([None, False]),
    }
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    overloads,
    st.lists(st.tuples(st.integers(1, 150), segments), min_size=2, max_size=30),
    st.booleans(),
    st.floats(0.0, 0.05),
)
def test_every_policy_finishes_every_request_with_bounded_recompute(cfg, specs, online, spacing):
    config = SchedulerConfig(block_size=16, **cfg)
    predictor = OnlinePredictor() if online else OraclePredictor()
    sched = Scheduler(config, easy_profile(), predictor)
    reqs = []
    for i, (prompt, segs) in enumerate(specs):
        plan = [Segment(out, t or 0.0, ret) for out, t, ret in segs[:-1]]
        plan.append(Segment(segs[-1][0]))
        reqs.append(Request(f"r{i}", i * spacing, prompt, plan))
    driver = Driver(sched)
    for r in reqs:  # arrivals at their times (a burst when spacing is 0)
        while driver.now < r.arrival_time:
            check_invariants(sched, driver.step(), driver.finished)
        driver.add(r)
    driver.run_until_idle(max_steps=200_000)  # raises if the scheduler never drains
    assert sorted(r.request_id for r in driver.finished) == sorted(r.request_id for r in reqs)
    assert sched.stats().recomputed_tokens <= RECOMPUTE_BOUND * served_tokens(driver)


def _older_long_younger_short(rule3: bool) -> tuple[list[str], Driver]:
    """A long request (low value density) is admitted first, a short one (high density)
    after it; the pool (10 blocks of 16) holds both prompts but not both outputs. The
    rules always engaged (`recompute_budget=None`); without rule 3, protection (rule 2)."""
    cfg = SchedulerConfig(policy="augserve", block_size=16, num_device_blocks=10,
                          max_batch_tokens=256, recompute_budget=None,
                          newest_first=rule3)  # fmt: skip
    sched = Scheduler(cfg, easy_profile(), OraclePredictor())
    victims: list[str] = []
    preempt = sched.kv.preempt

    def logged(req: Request) -> int:
        victims.append(req.request_id)
        return preempt(req)

    sched.kv.preempt = logged  # type: ignore[method-assign]
    driver = Driver(sched)
    driver.add(Request("long", 0.0, 90, [Segment(60)]))
    driver.step()  # "long" is admitted first
    driver.add(Request("short", driver.now, 40, [Segment(30)]))
    driver.run_until_idle()
    return victims, driver


def test_rule3_while_thrashing_the_last_to_get_kv_loses_it_first():
    """Rule 3 (docs/scheduler.md, "Progress under overload"): while the rules are
    engaged, a holder may take KV only from holders that got theirs after it (vLLM's
    order: the last admitted is preempted first), so the request that has computed most
    keeps its KV (the short one waits, as in vLLM, and is not protected: the order is
    fixed, so it cannot cycle). In AugServe's own order the short request, denser in
    value, preempts the long one, which recomputes its prompt and its output so far."""
    victims, driver = _older_long_younger_short(rule3=True)
    assert victims and set(victims) == {"short"}
    assert sorted(r.request_id for r in driver.finished) == ["long", "short"]
    victims, driver = _older_long_younger_short(rule3=False)
    assert victims and victims[0] == "long"
    assert driver.sched.stats().recomputed_tokens >= 90
