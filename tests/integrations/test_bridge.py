"""PolicyBridge: our policy over another engine's queues, without the engine (no vLLM here)."""

from __future__ import annotations

import pytest

from augserve.core.request import ContextPolicy, Request, Segment
from augserve.integrations.bridge import PolicyBridge
from augserve.integrations.engine_facts import EngineFacts
from augserve.integrations.options import PluginOptions
from augserve.profiles import load_profile
from augserve.sched.policies import make_policy

FACTS = EngineFacts(block_size=16, num_blocks=1000, max_batch_tokens=512, max_num_seqs=64)


def bridge(**options: object) -> PolicyBridge:
    """A bridge whose predictor reads the plans these tests send (the plugin's default,
    `online`, is tested in test_bridge_online.py)."""
    return PolicyBridge(PluginOptions(**{"predictor": "oracle", **options}), FACTS)  # type: ignore[arg-type]


def plan(*rows: tuple[int, float | None, int]) -> list[Segment]:
    return [Segment(o, c, r) for o, c, r in rows]


def test_order_is_ascending_cost_at_equal_wait_and_costs_are_the_policys() -> None:
    b = bridge()
    b.arrive("long", 900, 0.0, plan((400, None, 0)))
    b.arrive("short", 20, 0.0, plan((5, None, 0)))
    b.arrive("mid", 200, 0.0, plan((50, 1.0, 10), (30, None, 0)))
    costs = {i: b.cost(i) for i in ("long", "short", "mid")}
    assert b.order(["long", "short", "mid"], 0.0) == sorted(costs, key=lambda i: costs[i])
    assert b.order(["long", "short", "mid"], 0.0)[0] == "short"
    # the same number our own policy computes for the same request (no second formula)
    ref = make_policy(
        b.config.with_(forced_context_policy=ContextPolicy.DISCARD), load_profile("opt-13b-h800"), b
    )
    req = Request("mid", 0.0, 200, segments=plan((50, 1.0, 10), (30, None, 0)))
    req.pred_output_len, req.pred_call_time = 50.0, 1.0
    assert costs["mid"] == pytest.approx(ref.arrival_cost(req))  # type: ignore[attr-defined]


def test_waiting_ages_the_order_but_not_the_preempt_order() -> None:
    b = bridge()
    b.arrive("dear", 600, 0.0, plan((200, None, 0)))
    b.arrive("cheap", 20, 0.0, plan((5, None, 0)))
    dear, cheap = b.cost("dear"), b.cost("cheap")
    assert dear is not None and cheap is not None and dear > cheap
    # "cheap" runs every step, "dear" waits: V = 1 + beta * ms waited, and "dear"
    # overtakes once V_dear / dear > 1 / cheap
    wait = (dear / cheap - 1.0) / (b.options.beta * 1000.0)
    for now, first in ((wait * 0.9, "cheap"), (wait * 1.1, "dear")):
        b.scheduled(["cheap"], ["dear", "cheap"], now)
        assert b.order(["cheap", "dear"], now)[0] == first
    assert b.preempt_order(["dear", "cheap"]) == ["cheap", "dear"]  # the last is preempted


def test_resubmitted_context_is_a_return_refined_with_the_applied_policy() -> None:
    costs = {}
    for cached in (0, 10_000):
        b = bridge()
        b.arrive("t0", 100, 0.0, plan((10, 2.0, 5), (20, None, 0)), session="s")
        b.sync("t0", 110, 110, 10, running=True)
        b.finish("t0", 1.0, num_tokens=110, num_output=10, session="s")
        assert b.num_sessions() == 1
        m = b.arrive("t1", 115, 3.0, plan((20, None, 0)), session="s", cached_tokens=cached)
        assert b.num_sessions() == 0
        assert (m.segment_index, m.prompt_len, m.num_tokens) == (1, 100, 115)
        assert m.num_generated_tokens == 10 and m.num_returned_tokens == 5
        call = m.calls[-1]
        assert (call.start, call.end, call.returned_tokens) == (1.0, 3.0, 5)
        applied = ContextPolicy.PRESERVE if cached else ContextPolicy.DISCARD
        assert call.policy is applied
        ref = make_policy(b.config.with_(forced_context_policy=ContextPolicy.DISCARD), b.latency, b)
        assert b.cost("t1") == pytest.approx(ref.feedback_cost(m, applied))  # type: ignore[attr-defined]
        costs[applied] = b.cost("t1")
    assert costs[ContextPolicy.DISCARD] > costs[ContextPolicy.PRESERVE]  # recompute costs


def test_a_turn_that_is_not_a_continuation_is_a_new_request() -> None:
    b = bridge(session_ttl_s=5.0)
    b.arrive("a", 100, 0.0, session="s")
    b.finish("a", 1.0, num_tokens=110, num_output=10, session="s")
    assert b.arrive("b", 50, 2.0, session="s").segment_index == 0  # shorter context
    b.arrive("c", 100, 2.0, session="t")
    b.finish("c", 3.0, num_tokens=110, num_output=10, session="t")
    assert b.arrive("d", 120, 9.0, session="t").segment_index == 0  # expired (ttl 5 s)
    b.arrive("e", 100, 9.0, session="u")
    b.finish("e", 9.5, num_tokens=105, num_output=5, session="u", ended_ok=False)
    assert b.num_sessions() == 0  # an aborted turn is no call


def test_streaming_sessions_plan_preserve_and_resume_in_place() -> None:
    b = bridge()
    p = plan((10, 4.0, 5), (10, None, 0))
    b.arrive("keep", 300, 0.0, p, resumable=True, hold=ContextPolicy.PRESERVE)
    b.arrive("drop", 300, 0.0, p, session="x")
    keep, drop = b.cost("keep"), b.cost("drop")
    assert keep is not None and drop is not None and keep > drop  # Preserve holds KV in the call
    b.sync("keep", 310, 309, 10, running=True)
    assert b.stream_paused("keep", 1.0, 309) is ContextPolicy.PRESERVE
    assert b.mirror("keep").in_call  # type: ignore[union-attr]
    b.resume_stream("keep", 314, 309, 5.0)
    m = b.mirror("keep")
    assert m is not None and m.segment_index == 1 and not m.in_call
    assert (m.calls[-1].start, m.calls[-1].end, m.calls[-1].returned_tokens) == (1.0, 5.0, 5)
    assert m.calls[-1].policy is ContextPolicy.PRESERVE


def test_dynamic_budget_follows_free_blocks_and_static_policies_keep_theirs() -> None:
    b = bridge()
    assert b.token_budget(1000, 0) == 512  # plenty free: T_max
    assert b.token_budget(20, 0) == 20 * 16  # 320 tokens free
    assert b.token_budget(1, 0) == 256  # clipped at beta_low * T_max
    assert b.token_budget(10, 10) == 320  # reclaimable counts as free
    assert bridge(policy="infercept").token_budget(1, 0) is None
    assert bridge(policy="infercept", dynamic_budget=True).token_budget(1, 0) == 256


def test_other_policies_rank_too() -> None:
    b = bridge(policy="ssjf")
    b.arrive("a", 10, 0.0, plan((300, None, 0)))
    b.arrive("b", 900, 0.1, plan((3, None, 0)))
    assert b.order(["a", "b"], 1.0) == ["b", "a"]  # shortest predicted output first
    assert b.cost("a") is None  # only AugServe has a space-time cost
    fcfs = bridge(policy="infercept")
    fcfs.arrive("a", 10, 0.0)
    fcfs.arrive("b", 10, 0.5)
    assert fcfs.order(["b", "a", "zz"], 1.0) == ["a", "b", "zz"]  # unknown ids last


def test_noisy_predictor_changes_costs_not_the_plan() -> None:
    exact = bridge()
    noisy = bridge(predictor="noisy:0.5", seed=3)
    for b in (exact, noisy):
        b.arrive("r", 100, 0.0, plan((100, None, 0)))
    m = noisy.mirror("r")
    assert m is not None and m.pred_output_len in (50.0, 150.0)
    assert noisy.cost("r") != exact.cost("r")


def test_a_streaming_pause_takes_the_policys_min_waste_choice() -> None:
    """Unforced, a pause is Preserve for a short predicted call and Discard for a long
    one (INFERCEPT's waste on this profile); a Discard pause resumes as a Discard return."""
    b = bridge()
    chosen = {}
    for rid, call in (("short", 1e-4), ("long", 30.0)):
        b.arrive(rid, 300, 0.0, plan((10, call, 5), (10, None, 0)), resumable=True)
        b.sync(rid, 310, 309, 10, running=True)
        chosen[rid] = b.stream_paused(rid, 1.0, 309)
    assert chosen == {"short": ContextPolicy.PRESERVE, "long": ContextPolicy.DISCARD}
    assert (b.counts["pauses_preserve"], b.counts["pauses_discard"]) == (1, 1)
    b.resume_stream("long", 314, 0, 31.0)  # the engine released its KV: nothing computed
    m = b.mirror("long")
    assert m is not None and m.calls[-1].policy is ContextPolicy.DISCARD
    assert m.calls[-1].returned_tokens == 5  # counted from the context at the pause
    forced = bridge(stream_context="preserve")
    forced.arrive("long", 300, 0.0, plan((10, 30.0, 5), (10, None, 0)), resumable=True)
    assert forced.stream_paused("long", 1.0, 309) is ContextPolicy.PRESERVE
    held = bridge()
    held.arrive("x", 300, 0.0, plan((10, 1e-4, 5)), resumable=True, hold=ContextPolicy.DISCARD)
    assert held.stream_paused("x", 1.0, 309) is ContextPolicy.DISCARD
