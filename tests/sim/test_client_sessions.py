"""The simulator with client sessions (`sim/client_sessions.py`): each call ends the turn
with "tool_calls", the client sends the next turn when its tool returns, and a kept
session's KV is taken over, as on the server. Times are computed by hand."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_simulator import EASY

from augserve.core.config import scheduler_config_for
from augserve.core.request import FinishReason, Request, RequestStatus, Segment
from augserve.predict.base import make_predictor
from augserve.sched.policies import POLICIES
from augserve.sim.simulator import Simulator


def _run(policy: str, ttl: float, **kw: object) -> tuple[Simulator, dict[str, Request]]:
    cfg = scheduler_config_for(EASY, policy, session_ttl=ttl, enable_prefix_caching=True, **kw)
    sim = Simulator(EASY, cfg, make_predictor("oracle"), check=True, client_sessions=True)
    # prompt 10; generate 2, the client's tool takes 0.5 s and returns 3; generate 2
    res = sim.run([Request("a", 0.0, 10, [Segment(2, 0.5, 3), Segment(2)])], 10.0)
    return sim, {r.request_id: r for r in res.requests}


def test_a_kept_session_is_continued_by_the_next_turn_as_on_the_server() -> None:
    """Turn 1 prefills 10 tokens (20 ms) and decodes one (30 ms): it ends with
    "tool_calls" and stays paused as a session. Turn 2 arrives when the tool returns
    (0.530 s) with the whole context plus the 3 returned tokens, takes the session's 11
    computed tokens over and prefills only the last sampled token and the result (14
    ms), exactly the times of a server-side call (test_simulator's by-hand test)."""
    sim, reqs = _run("augserve", ttl=60.0)
    first, second = reqs["a"], reqs["a/1"]
    assert first.first_token_time == pytest.approx(0.020)
    assert first.calls[0].start == pytest.approx(0.030)
    assert first.status is RequestStatus.FINISHED_STOPPED  # ended by its continuation
    assert first.finish_reason is FinishReason.TOOL_CALLS
    assert second.arrival_time == pytest.approx(0.530)
    assert first.token_ids is not None and second.token_ids is not None
    assert second.token_ids[:12] == first.token_ids and second.prompt_len == 15
    assert second.num_inherited_tokens == 12 and second.segments == [Segment(2)]
    assert second.first_token_time == pytest.approx(0.544)
    assert second.finish_time == pytest.approx(0.554)
    assert second.finish_reason is FinishReason.STOP and second.num_generated_tokens == 2
    assert sim.sched is not None and sim.sched.stats().num_sessions == 0


def test_without_sessions_the_next_turn_recomputes_what_the_cache_lacks() -> None:
    """No session kept: turn 1 ends at 0.030 and its KV goes to the prefix cache, which
    holds no full 16-token block of it, so turn 2 prefills all 15 tokens (25 ms)."""
    _, reqs = _run("vllm", ttl=0.0)
    first, second = reqs["a"], reqs["a/1"]
    assert first.finish_time == pytest.approx(0.030)
    assert first.finish_reason is FinishReason.TOOL_CALLS
    assert second.arrival_time == pytest.approx(0.530)
    assert second.first_token_time == pytest.approx(0.555)
    assert second.finish_time == pytest.approx(0.565)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(POLICIES)),
    st.sampled_from([0.0, 60.0]),
    st.integers(30, 64),
    st.lists(
        st.tuples(
            st.integers(1, 120),
            st.lists(
                st.tuples(st.integers(1, 40), st.floats(0.0, 0.3), st.integers(0, 40)),
                min_size=1,
                max_size=4,
            ),  # fmt: skip
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_every_policy_ends_every_session_under_kv_pressure(policy, ttl, blocks, specs):
    """Client sessions on a small pool (a session's context, up to 445 tokens, fits it
    alone): every turn of every session is sent and finishes, under the scheduler's
    invariants, whatever the policy and whether sessions are kept."""
    cfg = scheduler_config_for(EASY, policy, session_ttl=ttl, num_device_blocks=blocks,
                               enable_prefix_caching=True, max_num_seqs=64)  # fmt: skip
    sim = Simulator(EASY, cfg, make_predictor("oracle"), check=True, client_sessions=True)
    reqs = []
    for i, (prompt, segs) in enumerate(specs):
        plan = [Segment(out, t, ret) for out, t, ret in segs] + [Segment(5)]
        reqs.append(Request(f"s{i}", 0.01 * i, prompt, plan))
    res = sim.run(reqs, 10.0, 600.0)
    assert not res.unfinished and not res.stats.stalled
    assert len(res.requests) == sum(len(s) + 1 for _, s in specs)  # a turn per call, + 1
    reasons = {r.request_id: r.finish_reason for r in res.requests}
    for i, (_, segs) in enumerate(specs):
        assert reasons[f"s{i}/{len(segs)}"] is FinishReason.STOP
        assert all(reasons[f"s{i}" + (f"/{k}" if k else "")] is FinishReason.TOOL_CALLS
                   for k in range(len(segs)))  # fmt: skip


def test_the_scheduler_can_believe_another_profile_than_the_engine_runs() -> None:
    """`scheduler_profile`: the iterations keep the engine's times (the by-hand ones of
    the first test) while the scheduler is handed the other profile, as a served
    scheduler whose profile is off its engine (`sessions-q1 in the simulator`)."""
    told = EASY.scaled(2.0)
    cfg = scheduler_config_for(EASY, "augserve", session_ttl=60.0, enable_prefix_caching=True)
    sim = Simulator(EASY, cfg, make_predictor("oracle"), client_sessions=True,
                    scheduler_profile=told)  # fmt: skip
    res = sim.run([Request("a", 0.0, 10, [Segment(2, 0.5, 3), Segment(2)])], 10.0)
    reqs = {r.request_id: r for r in res.requests}
    assert sim.sched is not None and sim.sched.latency is told
    assert sim.sched.policy.tau_iter == pytest.approx(2 * EASY.decode_iter_time())
    assert reqs["a"].first_token_time == pytest.approx(0.020)
    assert reqs["a/1"].finish_time == pytest.approx(0.554)
