"""`augserve-slo`'s admission gate: memory kept for the growth of the requests running."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from driver import Driver, easy_profile

from augserve.core.block_pool import BlockPool
from augserve.core.config import SchedulerConfig
from augserve.core.request import ContextPolicy, FinishReason, Request, Segment
from augserve.predict.base import OraclePredictor
from augserve.sched.admission import GrowthGate, KVGateMemory
from augserve.sched.kv_manager import KVCacheManager
from augserve.sched.policies import POLICIES
from augserve.sched.policies.slack import SlackPolicy
from augserve.sched.scheduler import Scheduler

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from test_ranking_modes import decisions  # noqa: E402


def _memory(blocks: int) -> KVCacheManager:
    return KVCacheManager(BlockPool(blocks, 0, 16), swap_budget_blocks=4)


def _holder(memory: KVCacheManager, rid: str, tokens: int, left: float) -> Request:
    """A request holding the blocks of `tokens` tokens, `left` more predicted."""
    req = Request(rid, 0.0, tokens)
    req.pred_output_len = left
    memory.allocate_slots(req, memory.pool.blocks_for(tokens))
    req.num_computed_tokens = tokens
    return req


def _new(rid: str, prompt: int, out: float) -> Request:
    req = Request(rid, 0.0, prompt)
    req.pred_output_len = out
    return req


def test_the_gate_keeps_a_share_of_the_holders_growth_free() -> None:
    mem = _memory(20)
    a = _holder(mem, "a", 32, 64)  # 2 blocks held, 4 more predicted
    b = _holder(mem, "b", 16, 80)  # 1 block held, 5 more predicted
    gate = GrowthGate(0.5, KVGateMemory(mem), [a, b])
    assert gate.reserve == 0.5 * (4 + 5)
    assert mem.pool.num_free_device == 17
    assert gate.admits(_new("fits", 100, 90))  # 12 blocks + 4.5 <= 17
    assert not gate.admits(_new("too-big", 120, 100))  # 14 blocks + 4.5 > 17
    assert gate.closed
    assert not gate.admits(_new("tiny", 1, 1))  # closed: nobody jumps the refused one


def test_admitted_requests_join_the_reserve_and_no_holder_means_admit() -> None:
    mem = _memory(8)
    gate = GrowthGate(1.0, KVGateMemory(mem), [])
    huge = _new("huge", 1000, 1000)
    assert gate.admits(huge)  # nothing runs that would ever free memory: admit
    mem.allocate_slots(huge, 2)
    gate.admitted(huge)
    assert gate.reserve == mem.pool.blocks_for(2000) - 2
    assert not gate.admits(_new("next", 1, 1))


def test_the_gate_counts_reclaimable_memory_as_room() -> None:
    mem = _memory(10)
    a = _holder(mem, "a", 16, 32)  # 2 more blocks predicted
    paused = _holder(mem, "p", 64, 1)  # 4 blocks, paused in a call it may be evicted for
    mem.pause(paused, ContextPolicy.SWAP, discard_now=False)
    assert mem.reclaimable_blocks() == 4
    gate = GrowthGate(1.0, KVGateMemory(mem), [a])
    assert gate.admits(_new("x", 64, 32))  # 6 blocks + 2 <= 5 free + 4 reclaimable
    assert not GrowthGate(1.0, KVGateMemory(mem), [a]).admits(_new("y", 96, 32))  # 8 + 2 > 9


def test_the_gate_rejects_a_negative_share() -> None:
    with pytest.raises(ValueError, match="frac"):
        GrowthGate(-0.1, KVGateMemory(_memory(4)), [])
    with pytest.raises(ValueError, match="admit_growth"):
        SchedulerConfig(admit_growth=-1.0)


def _run(admit_growth: float) -> tuple[Driver, list[Request]]:
    """Two requests that each grow to 7 blocks, on a device of 10 blocks."""
    cfg = SchedulerConfig(policy="augserve-slo", num_device_blocks=10, num_host_blocks=0,
                          max_batch_tokens=256, admit_growth=admit_growth)  # fmt: skip
    driver = Driver(Scheduler(cfg, easy_profile(), OraclePredictor()), iter_time=0.01)
    a = Request("a", 0.0, 16, [Segment(90)])
    b = Request("b", 0.0, 16, [Segment(90)])
    driver.add(a)
    driver.step()  # a alone holds KV when b arrives
    driver.add(b)
    driver.run_until_idle()
    assert all(r.finish_reason is FinishReason.STOP for r in (a, b))
    return driver, [a, b]


def test_without_the_gate_the_second_request_is_preempted_with_it_it_waits() -> None:
    plain, _ = _run(0.0)
    discarded = [rid for out in plain.outputs for rid in out.discarded]
    assert discarded  # admitted at once, both grew, one was preempted and recomputed
    gated, (a, b) = _run(1.0)
    assert not [rid for out in gated.outputs for rid in out.discarded]
    assert b.first_token_time is not None and a.finish_time is not None
    assert b.first_token_time > a.finish_time - 0.1  # b waited for a's memory
    computed = lambda d: sum(c.num_tokens for o in d.outputs for c in o.chunks)  # noqa: E731
    assert computed(gated) < computed(plain)  # no recomputation


class _Gated(SlackPolicy):
    name = "augserve-slo/test-admit"
    admit_growth = 1.0


def test_the_share_is_a_scheduler_option_and_zero_turns_the_gate_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(POLICIES, _Gated.name, _Gated)
    by_option = decisions("augserve-slo", True, 1, admit_growth=_Gated.admit_growth)
    assert by_option == decisions(_Gated.name, True, 1)
    off = decisions("augserve-slo", True, 1, admit_growth=0.0)
    assert off != by_option  # the gate changed some decision
    assert SlackPolicy.admit_growth == 0.2
    assert decisions("augserve-slo", True, 1) == decisions(
        "augserve-slo", True, 1, admit_growth=0.2
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_incremental_ranking_decides_as_a_full_sort_with_the_gate(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(POLICIES, _Gated.name, _Gated)
    refusals: list[str] = []
    admits = GrowthGate.admits

    def counting(self: GrowthGate, req: Request) -> Any:
        ok = admits(self, req)
        if not ok:
            refusals.append(req.request_id)
        return ok

    monkeypatch.setattr(GrowthGate, "admits", counting)
    full = decisions(_Gated.name, False, seed)
    assert len(full) > 100
    assert len(refusals) > 5  # the gate did hold requests back along the way
    assert decisions(_Gated.name, True, seed) == full
