"""The plugin's default predictor, `online`, fed from what the engine shows (no vLLM here).

Requests carry no `augserve_plan`: the bridge plans them with the online
predictor, which learns output lengths from finished turns and call durations
from the gaps between a session's turns (`integrations/predictions.py`).
"""

from __future__ import annotations

import pytest

from augserve.core.request import Segment
from augserve.integrations.bridge import PolicyBridge
from augserve.integrations.engine_facts import EngineFacts
from augserve.integrations.options import PluginOptions
from augserve.predict.online import OnlineConfig
from augserve.sched.policies import POLICIES

FACTS = EngineFacts(block_size=16, num_blocks=1000, max_batch_tokens=512, max_num_seqs=64)
PRIOR = OnlineConfig().output_prior


def bridge(**options: object) -> PolicyBridge:
    return PolicyBridge(PluginOptions(**options), FACTS)  # type: ignore[arg-type]


def finish_turns(b: PolicyBridge, kind: str, n: int, out: int, t0: float = 0.0) -> float:
    """`n` requests of `kind` that each generate `out` tokens and end (no session)."""
    now = t0
    for i in range(n):
        rid = f"{kind}-{i}"
        b.arrive(rid, 100, now, kind=kind, max_tokens=1000)
        now += 1.0
        b.finish(rid, now, num_tokens=100 + out, num_output=out)
    return now


def session_turns(b: PolicyBridge, n: int, gap: float, returned: int) -> float:
    """`n` two-turn conversations: a 12-token turn, a call of `gap` s, a resubmission."""
    now = 0.0
    for i in range(n):
        s = f"s{i}"
        b.arrive(f"{s}-0", 100, now, session=s, kind="agent")
        now += 1.0
        b.finish(f"{s}-0", now, num_tokens=112, num_output=12, session=s)
        now += gap
        m = b.arrive(f"{s}-1", 112 + returned, now, session=s, kind="agent", cached_tokens=112)
        assert m.segment_index == 1 and m.calls[-1].end == now  # a return, not a new request
        now += 1.0
        b.finish(f"{s}-1", now, num_tokens=112 + returned + 8, num_output=8)
    return now


def test_the_default_is_online_and_a_request_without_a_plan_is_not_max_tokens() -> None:
    b = bridge()
    assert b.options.predictor == "online" and b.predictor.name == "online"
    m = b.arrive("r", 100, 0.0, max_tokens=4000)
    assert m.segments == []  # nothing scripted: the predictor plans it
    assert m.pred_output_len == pytest.approx(PRIOR)  # not 4000
    small = b.arrive("cap", 100, 0.0, max_tokens=10)
    assert small.pred_output_len == 10.0  # capped by what the turn may generate
    # the oracle, which reads plans, still falls back to max_tokens
    oracle = bridge(predictor="oracle").arrive("r", 100, 0.0, max_tokens=40)
    assert oracle.segments == [Segment(40)] and oracle.pred_output_len == 40.0


def test_output_lengths_are_learned_from_finished_requests_and_change_the_order() -> None:
    b = bridge()
    finish_turns(b, "short", 12, out=5)
    finish_turns(b, "long", 12, out=400, t0=100.0)
    assert b.predictions.counts["segments"] == 24
    s = b.arrive("new-short", 100, 200.0, kind="short", max_tokens=1000)
    g = b.arrive("new-long", 100, 200.0, kind="long", max_tokens=1000)
    assert s.pred_output_len < 8 and g.pred_output_len > 250
    assert s.pred_call_time is None and g.pred_call_time is None  # they ended: no call
    assert b.order(["new-long", "new-short"], 200.0) == ["new-short", "new-long"]
    # a fresh bridge (nothing learned) cannot tell them apart: the id breaks the tie
    fresh = bridge()
    for rid, kind in (("new-long", "long"), ("new-short", "short")):
        fresh.arrive(rid, 100, 0.0, kind=kind, max_tokens=1000)
    assert fresh.cost("new-long") == fresh.cost("new-short")


def test_the_gaps_between_a_sessions_turns_are_learned_as_calls() -> None:
    b = bridge()
    now = session_turns(b, 10, gap=3.0, returned=20)
    assert b.predictions.counts["calls"] == 10
    m = b.arrive("next", 100, now, session="fresh", kind="agent")
    assert m.pred_call_time is not None  # first turns of this kind end in a call
    assert m.pred_call_time == pytest.approx(3.0, rel=0.3)  # the prior was 1 s
    assert m.pred_return_len == pytest.approx(20.0, rel=0.3)
    assert m.pred_output_len == pytest.approx(12.0, rel=0.3)


def test_a_turn_never_resubmitted_is_learned_as_an_end_not_a_call() -> None:
    b = bridge(session_ttl_s=5.0)
    now = 0.0
    for i in range(10):
        b.arrive(f"t{i}", 100, now, session=f"s{i}", kind="chat")
        b.finish(f"t{i}", now + 1.0, num_tokens=130, num_output=30, session=f"s{i}")
        now += 10.0  # past the TTL: the last turn is dropped unanswered
    assert b.predictions.counts == {"segments": 9, "calls": 0}
    m = b.arrive("x", 100, now, session="s-new", kind="chat")  # drops the tenth
    assert b.predictions.counts["segments"] == 10
    assert m.pred_call_time is None and m.pred_output_len == pytest.approx(30.0, rel=0.3)


def test_a_streaming_sessions_pause_is_learned_as_a_call() -> None:
    b = bridge()
    b.arrive("keep", 300, 0.0, resumable=True)
    b.sync("keep", 310, 309, 10, running=True)
    b.stream_paused("keep", 1.0, 309)
    b.resume_stream("keep", 314, 309, 5.0)
    assert b.predictions.counts == {"segments": 1, "calls": 1}
    assert b.predictor.calls.global_stats.count == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_registered_policy_ranks_requests_without_a_plan(policy: str) -> None:
    b = bridge(policy=policy)
    finish_turns(b, "short", 6, out=5)
    for rid in ("a", "b", "c"):
        b.arrive(rid, 50, 10.0, kind="short", max_tokens=64)
    order = b.order(["c", "b", "a"], 11.0)
    assert sorted(order) == ["a", "b", "c"]
    b.scheduled(order[:1], order, 11.0)


def test_augserve_slo_serves_requests_that_can_still_meet_their_slo_first() -> None:
    b = bridge(policy="augserve-slo", slo_ttft=1.0, slo_reserve=0.0)
    a = bridge(policy="augserve")
    for br in (a, b):
        br.arrive("old", 100, 0.0, max_tokens=64)
        br.arrive("new", 100, 5.0, max_tokens=64)
    assert a.order(["new", "old"], 5.5) == ["old", "new"]  # aged: it waited longer
    assert b.order(["new", "old"], 5.5) == ["new", "old"]  # old missed its TTFT: lost
    # a first token seen in time (the engine's output count) keeps a request feasible
    b.sync("new", 101, 100, 1, running=True, now=5.6)
    assert b.mirror("new").first_token_time == 5.6  # type: ignore[union-attr]
