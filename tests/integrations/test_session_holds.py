"""Client sessions' KV held through their calls inside vLLM (`integrations/holds.py`,
`vllm_memory.py`, `PolicyBridge.finish`), without vLLM: the bookkeeping, the policy's
choice, and the scheduler glue over a stand-in for vLLM's scheduler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from augserve.core.request import ContextPolicy
from augserve.integrations.holds import GRACE_S, SessionHolds
from augserve.integrations.vllm_memory import KVMemoryMixin
from tests.integrations.test_bridge_online import bridge, finish_turns, session_turns

PRESERVE, DISCARD = ContextPolicy.PRESERVE, ContextPolicy.DISCARD


# --- the bookkeeping ------------------------------------------------------------------
def test_a_hold_lasts_until_its_next_turn_is_scheduled() -> None:
    h = SessionHolds(ttl_s=600.0)
    assert h.hold("a-0", "req", "a", 7, now=10.0, call_s=2.0) == []
    assert len(h) == 1 and h.blocks() == 7 and "a-0" in h and h.covered("a-1") == 0
    assert h.successor_arrived("a", "a-1", now=11.0) and not h.successor_arrived("b", "b-1", 11.0)
    assert h.covered("a-1") == 7
    assert h.due(100.0, scheduled=["other"]) == []  # waits for its next turn, not 2x the call
    (done,) = h.due(100.0, scheduled=["a-1"])
    assert (done.request_id, done.request) == ("a-0", "req") and len(h) == 0
    assert h.counts == {"held": 1, "taken_over": 1, "expired": 0, "pressure": 0}


def test_a_hold_nobody_continues_ends_at_twice_its_call_plus_grace_or_the_ttl() -> None:
    h = SessionHolds(ttl_s=30.0)
    h.hold("a-0", None, "a", 3, now=0.0, call_s=2.0)
    h.hold("b-0", None, "b", 3, now=0.0, call_s=100.0)
    assert h.due(4.0 + GRACE_S - 1e-6, ()) == []
    assert [x.request_id for x in h.due(4.0 + GRACE_S, ())] == ["a-0"]
    assert [x.request_id for x in h.due(30.0, ())] == ["b-0"]  # the ttl caps it
    # a next turn that came but never ran (aborted) frees it
    h.hold("c-0", None, "c", 3, now=50.0, call_s=1.0)
    h.successor_arrived("c", "c-1", now=50.5)
    assert [x.request_id for x in h.due(50.6, (), gone=["c-1"])] == ["c-0"]


def test_a_newer_turn_of_the_session_replaces_the_older_hold() -> None:
    h = SessionHolds(ttl_s=600.0)
    h.hold("a-0", None, "a", 3, now=0.0, call_s=1.0)
    (old,) = h.hold("a-1", None, "a", 5, now=2.0, call_s=1.0)
    assert old.request_id == "a-0" and len(h) == 1 and h.blocks() == 5


def test_under_pressure_the_latest_return_goes_first_and_a_continued_session_last() -> None:
    h = SessionHolds(ttl_s=600.0)
    h.hold("soon", None, "s1", 4, now=0.0, call_s=1.0)
    h.hold("late", None, "s2", 4, now=0.0, call_s=9.0)
    h.hold("mid", None, "s3", 4, now=0.0, call_s=5.0)
    h.hold("back", None, "s4", 4, now=0.0, call_s=20.0)
    h.successor_arrived("s4", "s4-1", now=1.0)
    assert h.victims(free_blocks=10, need_blocks=10) == []
    assert [x.request_id for x in h.victims(free_blocks=2, need_blocks=9)] == ["late", "mid"]
    assert [x.request_id for x in h.victims(free_blocks=0, need_blocks=8)] == ["soon", "back"]
    assert h.counts["pressure"] == 4 and len(h) == 0


def test_the_ttl_must_be_positive() -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        SessionHolds(ttl_s=0.0)


# --- the policy's choice (PolicyBridge.finish) ----------------------------------------
def _ended_turn(policy: str, running_tokens: int, **options: Any) -> float | None:
    """A 3,012-token session turn ends after 12 learned conversations whose turns each
    ended in a 2 s call; what `finish` says to hold."""
    b = bridge(policy=policy, **options)
    now = session_turns(b, 12, gap=2.0, returned=20)
    b.set_running_tokens(running_tokens)
    b.arrive("x-0", 3000, now, session="x", kind="agent")
    return b.finish("x-0", now + 1.0, num_tokens=3012, num_output=12, session="x")


def test_the_policy_holds_where_its_min_waste_choice_is_preserve() -> None:
    """INFERCEPT's waste: Preserve costs the call times the context, Discard the
    recompute times everything in memory. Beside 50,000 running tokens a 2 s call is
    cheaper to hold through; alone, recomputing 3,012 tokens is cheaper."""
    for policy in ("augserve", "augserve-slo", "infercept"):
        held = _ended_turn(policy, running_tokens=50_000)
        assert held is not None and held == pytest.approx(2.0, rel=0.05)
        assert _ended_turn(policy, running_tokens=0) is None


def test_no_hold_for_vllms_policy_without_a_session_or_when_told_to_discard() -> None:
    assert _ended_turn("vllm", running_tokens=50_000) is None  # it discards at every call
    assert _ended_turn("augserve", 50_000, client_sessions="discard") is None
    b = bridge()
    b.set_running_tokens(50_000)
    b.arrive("lone", 3000, 0.0, kind="agent")
    assert b.finish("lone", 1.0, num_tokens=3012, num_output=12) is None
    # turns of this kind are learned to end without a call: none is predicted, no hold
    b = bridge()
    now = finish_turns(b, "solo", 12, out=12)
    b.set_running_tokens(50_000)
    b.arrive("x-0", 3000, now, session="x", kind="solo")
    assert b.finish("x-0", now + 1.0, num_tokens=3012, num_output=12, session="x") is None


def test_the_clients_augserve_context_forces_the_choice() -> None:
    """`augserve_context` on a session's turn: preserve holds it (for its predicted call,
    the prior's 1 s here) even alone; discard never holds it."""
    for hold, running, want in ((PRESERVE, 0, 1.0), (DISCARD, 50_000, None)):
        b = bridge()
        b.set_running_tokens(running)
        b.arrive("x-0", 3000, 0.0, session="x", kind="agent", hold=hold)
        assert b.finish("x-0", 1.0, num_tokens=3012, num_output=12, session="x") == want
        assert b.counts["holds_preserve"] == (want is not None)


def test_bad_client_sessions_option_names_the_field() -> None:
    with pytest.raises(ValueError, match="client_sessions"):
        bridge(client_sessions="keep")


# --- the scheduler glue over a stand-in for vLLM's scheduler ------------------------------
@dataclass
class Req:
    request_id: str
    num_tokens: int
    num_computed_tokens: int = 0


@dataclass
class Pool:
    free: int

    def get_num_free_blocks(self) -> int:
        return self.free


@dataclass
class KV:
    block_pool: Pool
    freed: list[str] = field(default_factory=list)

    def free(self, request: Req) -> None:
        self.freed.append(request.request_id)


class VllmLike:
    """What `KVMemoryMixin` reads of vLLM's `Scheduler`."""

    def __init__(self, free_blocks: int) -> None:
        self.block_size = 16
        self.requests: dict[str, Req] = {}
        self.running: list[Req] = []
        self.waiting: list[Req] = []
        self.max_num_scheduled_tokens = 512
        self.max_num_running_reqs = 8
        self.kv_cache_manager = KV(Pool(free_blocks))
        self.freed_by_vllm: list[str] = []

    def _free_blocks(self, request: Req) -> None:
        self.freed_by_vllm.append(request.request_id)
        del self.requests[request.request_id]


class Sched(KVMemoryMixin, VllmLike):
    def __init__(self, free_blocks: int) -> None:
        super().__init__(free_blocks)
        self._init_holds(600.0)

    def end(self, req: Req, hold_s: float | None, session: str = "s") -> None:
        """vLLM's `_free_request` as `_AugServeMixin` drives it."""
        self.requests[req.request_id] = req
        if hold_s is not None:
            self._hold_at_free(req.request_id, session, hold_s, 0.0)
        self._free_blocks(req)


def test_a_held_turn_keeps_its_blocks_until_its_next_turn_runs() -> None:
    s = Sched(free_blocks=100)
    s.end(Req("s-0", 100, num_computed_tokens=100), hold_s=2.0)
    s.end(Req("t-0", 50, 50), hold_s=None, session="t")
    assert s.freed_by_vllm == ["t-0"] and s.requests == {}  # both left `requests`
    assert s._holds.blocks() == 7 and s.kv_cache_manager.freed == []  # ceil(100 / 16)
    nxt = Req("s-1", 130)
    s._successor("s", nxt.request_id)
    s.waiting.append(nxt)
    assert s._block_need() == 9 - 7  # its 130 tokens less the 7 blocks it will find
    assert s._release_before_step(now=1.0) == 7  # nothing in the way: still held
    s._release_after_step(1.0, {"s-1": 130})
    assert s.kv_cache_manager.freed == ["s-0"] and s._holds.blocks() == 0


def test_holds_in_the_steps_way_are_freed_before_it() -> None:
    s = Sched(free_blocks=3)
    s.end(Req("a-0", 160, 160), hold_s=1.0, session="a")  # 10 blocks, back soon
    s.end(Req("b-0", 160, 160), hold_s=30.0, session="b")  # 10 blocks, back late
    # decoding: r1's next token opens its 4th block, r2's fits in its 3rd
    s.running = [Req("r1", 49, 48), Req("r2", 40, 39)]
    s.waiting = [Req("w", 96)]  # 6 blocks: 1 + 6 = 7 needed, 3 free
    assert s._block_need() == 7
    assert s._release_before_step(now=0.5) == 10  # b went; 13 now free
    assert s.kv_cache_manager.freed == ["b-0"] and s._holds.counts["pressure"] == 1


def test_the_need_counts_prefill_chunks_and_whole_inputs_where_vllm_reserves_them() -> None:
    s = Sched(free_blocks=100)
    s.running = [Req("pre", 768, 256)]  # the rest of its prompt: 48 - 16 = 32 blocks
    s.max_num_scheduled_tokens = 600
    s.waiting = [Req("big", 1015)]  # 88 tokens of budget left: a 6-block chunk
    assert s._block_need() == 32 + 6
    s.scheduler_reserve_full_isl = True  # type: ignore[attr-defined]
    assert s._block_need() == 32 + 64  # vLLM admits it only if all 1,015 tokens fit


def test_a_prefix_cache_reset_frees_the_holds_first() -> None:
    class Base(VllmLike):
        def reset_prefix_cache(self) -> bool:  # vLLM's: fails while a block is in use
            return self.kv_cache_manager.freed == ["s-0"]

    class WithReset(KVMemoryMixin, Base):
        pass

    s = WithReset(free_blocks=100)
    s._init_holds(600.0)
    s.requests["s-0"] = Req("s-0", 64, 64)
    s._hold_at_free("s-0", "s", 5.0, 0.0)
    s._free_blocks(s.requests["s-0"])
    assert s._holds.blocks() == 4
    assert s.reset_prefix_cache() and s.kv_cache_manager.freed == ["s-0"] and not len(s._holds)


def test_unhold_defers_like_vllm_where_the_scheduler_can() -> None:
    s = Sched(free_blocks=100)
    deferred: list[str] = []
    s._free_request_blocks = lambda r: deferred.append(r.request_id)  # type: ignore[attr-defined]
    s.end(Req("s-0", 32, 32), hold_s=0.0)
    s._release_before_step(now=GRACE_S)  # 2 x 0 s + grace: expired
    assert deferred == ["s-0"] and s.kv_cache_manager.freed == []
