"""The min-waste choice at a call counts only the *other* running requests' tokens (issue 24)."""

from driver import easy_profile, step_results

from augserve.core.config import SchedulerConfig
from augserve.core.request import ContextPolicy, Request, Segment
from augserve.predict.base import OraclePredictor
from augserve.sched.context_policy import waste
from augserve.sched.scheduler import Scheduler


def _run_to_call(sched: Scheduler, req: Request) -> ContextPolicy:
    sched.add_request(req, 0.0)
    now = 0.0
    for _ in range(50):
        out = sched.schedule(now)
        now += 0.01
        upd = sched.update_from_output(out, step_results(out), now)
        if upd.calls_started:
            return upd.calls_started[0].policy
    raise AssertionError("no call started")


def test_a_lone_request_does_not_count_its_own_tokens_as_other():
    """Alone, L_other = 0: Discard wastes tau(L) L, Preserve c L. With c = 1.5 tau(L)
    Discard wins; counting the caller's own L as "other" (2 tau(L) L) flipped it to
    Preserve."""
    prof = easy_profile()
    prompt, out_len = 100, 2
    ctx = prompt + out_len
    tau = prof.prefill_time(ctx)
    call = 1.5 * tau
    assert (
        waste(ContextPolicy.DISCARD, ctx, call, 0, prof)
        < waste(ContextPolicy.PRESERVE, ctx, call, 0, prof)
        < waste(ContextPolicy.DISCARD, ctx, call, ctx, prof)
    )
    cfg = SchedulerConfig(policy="infercept", block_size=16, num_device_blocks=64)
    sched = Scheduler(cfg, prof, OraclePredictor())
    req = Request("a", 0.0, prompt, [Segment(out_len, call, 1), Segment(1)])
    assert _run_to_call(sched, req) is ContextPolicy.DISCARD
