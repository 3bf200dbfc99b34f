"""Requests paused in long calls never block a waiting request for long (issue 24).

Twelve requests without a scripted plan (what a server sees) pause in 30 s calls
and fill a small KV pool; a thirteenth arrives. On virtual time (0.01 s per
iteration) it must be admitted and finish long before the calls return, and
the twelve must then finish too. With the server's old default (the oracle,
which predicts no call for a request without a plan) the paused requests kept
their KV for the whole call and the new request waited 30 s.
"""

import pytest
from driver import easy_profile

from augserve.core.config import SchedulerConfig
from augserve.core.request import ContextPolicy, Request
from augserve.predict.base import make_predictor
from augserve.sched.output import StepEvent, StepResult
from augserve.sched.scheduler import Scheduler

CALL = 30.0
PROMPT = 60  # 4 blocks of 16 with its first tokens
OUT = 2  # tokens before the call, and after it


def _results(out, calls_made: set[str]) -> dict[str, StepResult]:
    res = {}
    for chunk in out.chunks:
        if not chunk.sample:
            continue
        req = chunk.request
        if req.segment_generated + 1 < OUT:
            res[req.request_id] = StepResult(token_id=7)
        elif req.request_id.startswith("p") and req.request_id not in calls_made:
            calls_made.add(req.request_id)
            res[req.request_id] = StepResult(7, StepEvent.CALL, tool="slow", args_len=10)
        else:
            res[req.request_id] = StepResult(7, StepEvent.FINISH)
    return res


@pytest.mark.parametrize("predictor", ["oracle", "online"])
@pytest.mark.parametrize("host_blocks", [0, 64])
@pytest.mark.parametrize("policy", ["augserve", "infercept"])
def test_paused_requests_do_not_hoard_the_pool(policy, host_blocks, predictor):
    cfg = SchedulerConfig(
        policy=policy, block_size=16, num_device_blocks=48, num_host_blocks=host_blocks
    )
    sched = Scheduler(cfg, easy_profile(), make_predictor(predictor))
    paused = [Request(f"p{i}", 0.0, PROMPT) for i in range(12)]
    for r in paused:
        sched.add_request(r, 0.0)
    now, calls, returns, added = 0.0, set(), {}, False
    new = Request("new", 0.5, PROMPT)
    while now < 2 * CALL + 5:
        if not added and now >= new.arrival_time:
            free_at_arrival = sched.pool.num_free_device
            sched.add_request(new, now)
            added = True
        for rid, t in list(returns.items()):
            if t <= now:
                del returns[rid]
                sched.resume(rid, 3, now)
        out = sched.schedule(now)
        now += 0.01
        upd = sched.update_from_output(out, _results(out, calls), now)
        for c in upd.calls_started:
            returns[c.request.request_id] = now + CALL
        if not sched.num_live and not returns:
            break
        if out.is_empty and not sched.has_runnable() and returns and added:
            now = max(now, min(returns.values()))
    assert all(len(r.calls) == 1 for r in paused)
    if predictor == "oracle":  # the pool was full of paused requests when the new one came
        assert free_at_arrival == 0
    assert new.finish_time is not None and new.finish_time < 0.5 + 2.0
    assert new.finish_time < min(r.calls[0].end for r in paused)
    for r in paused:
        assert r.finish_reason is not None and r.finish_reason.value == "stop"
        assert r.num_generated_tokens == 2 * OUT
    evicted = {ContextPolicy.SWAP if host_blocks else ContextPolicy.DISCARD}
    assert {r.calls[0].policy for r in paused} & evicted
