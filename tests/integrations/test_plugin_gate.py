"""The admission gate inside vLLM (`integrations/overload.py`, `vllm_memory.py`), without
vLLM: the gate over an engine's block counts, the bridge's count in our order, and the
scheduler glue that hides the held-back requests from vLLM's queue for one step."""

from __future__ import annotations

from collections import deque
from typing import Any

from augserve.core.request import Request
from augserve.integrations.overload import EngineGateMemory, admitted_count
from augserve.integrations.vllm_memory import KVMemoryMixin
from tests.integrations.test_bridge_online import bridge
from tests.integrations.test_session_holds import VllmLike


def _req(rid: str, tokens: int, left: float) -> Request:
    req = Request(rid, 0.0, tokens)
    req.pred_output_len = left
    return req


def test_the_gate_keeps_the_running_requests_growth_and_keeps_the_order() -> None:
    """16-token blocks, 10 free. `a` runs with 32 tokens and 64 predicted: it grows by
    6 - 2 = 4 blocks, all kept (frac 1). `w1` needs 3 blocks (48 tokens): 3 + 4 <= 10,
    through; its prompt takes 2 blocks (room 8) and its growth of 1 joins the reserve
    (5). `w2` needs 6: 6 + 5 > 8, held back, and so is everything after it."""
    running = [_req("a", 32, 64)]
    waiting = [_req("w1", 32, 16), _req("w2", 64, 32), _req("tiny", 1, 1)]
    memory = EngineGateMemory(block_size=16, num_blocks=20, free=10, reclaimable=0)
    assert admitted_count(1.0, running, waiting, memory) == 1
    assert memory.room() == 8
    # reclaimable blocks (held client sessions) count as room
    more = EngineGateMemory(block_size=16, num_blocks=20, free=10, reclaimable=3)
    # w2: 6 + 5 <= 11, through (room 7, reserve 7); tiny: 1 + 7 > 7
    assert admitted_count(1.0, running, waiting, more) == 2


def test_no_gate_without_a_share_and_the_first_goes_through_when_nothing_runs() -> None:
    waiting = [_req("big", 4000, 100), _req("next", 16, 1)]
    memory = EngineGateMemory(block_size=16, num_blocks=20, free=2, reclaimable=0)
    assert admitted_count(None, [_req("a", 32, 64)], waiting, memory) == 2
    memory = EngineGateMemory(block_size=16, num_blocks=20, free=2, reclaimable=0)
    assert admitted_count(1.0, [], waiting, memory) == 1  # it runs, then it is a holder


def test_the_bridge_gates_only_for_a_policy_with_a_gate() -> None:
    """900-token prompts, 64 tokens predicted (the online prior): 61 blocks each, 4 of
    them growth. `augserve-slo` keeps 0.2 of the growth: w1 (61 + 0.8 <= 150) and w2
    (61 + 1.6 <= 93) go through, w3 (61 + 2.4 > 36) waits."""
    for policy, want in (("augserve-slo", 2), ("augserve", 3), ("vllm", 3)):
        b = bridge(policy=policy)
        b.arrive("a", 900, 0.0, max_tokens=10_000)
        for rid in ("w1", "w2", "w3"):
            b.arrive(rid, 900, 0.0, max_tokens=10_000)
        memory = EngineGateMemory(block_size=16, num_blocks=1000, free=150, reclaimable=0)
        got = b.admissions(["a"], ["w1", "w2", "w3"], memory)
        assert got == want, policy


class Queue(deque[Any]):
    """vLLM's FCFS request queue, the two methods the gate calls."""

    def remove_requests(self, reqs: list[Any]) -> None:
        for r in reqs:
            self.remove(r)

    def add_request(self, req: Any) -> None:
        self.append(req)


class Gated(KVMemoryMixin, VllmLike):
    def __init__(self, policy: str, free_blocks: int) -> None:
        super().__init__(free_blocks)
        self._init_holds(600.0)
        self.augserve = bridge(policy=policy)
        self.waiting = Queue()


def test_held_back_requests_leave_vllms_queue_for_the_step_and_come_back_last() -> None:
    class R:
        def __init__(self, rid: str) -> None:
            self.request_id = rid

    s = Gated("augserve-slo", free_blocks=150)
    s.augserve.arrive("a", 900, 0.0, max_tokens=10_000)
    s.running = [R("a")]
    for rid in ("w1", "w2", "w3"):
        s.augserve.arrive(rid, 900, 0.0, max_tokens=10_000)
        s.waiting.append(R(rid))
    deferred = s._gate_waiting(held=0)
    assert [r.request_id for r in s.waiting] == ["w1", "w2"]  # what vLLM sees this step
    s.waiting.appendleft(R("preempted"))  # vLLM prepends what it preempts
    s._ungate(deferred)
    assert [r.request_id for r in s.waiting] == ["preempted", "w1", "w2", "w3"]
    s2 = Gated("augserve", free_blocks=150)
    s2.running = s.running
    for rid in ("w1", "w2", "w3"):
        s2.augserve.arrive(rid, 900, 0.0, max_tokens=10_000)
        s2.waiting.append(R(rid))
    assert s2._gate_waiting(held=0) == [] and len(s2.waiting) == 3
