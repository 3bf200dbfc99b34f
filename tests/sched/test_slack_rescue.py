"""`augserve-slo`'s rescue reserve: the oldest lost requests still progress, at a bounded rate."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from driver import Driver, easy_profile

from augserve.core.config import SchedulerConfig
from augserve.core.request import FinishReason, Request, Segment
from augserve.predict.base import OraclePredictor
from augserve.sched.policies import POLICIES
from augserve.sched.policies.slack import SlackPolicy
from augserve.sched.rescue import RescueReserve
from augserve.sched.scheduler import Scheduler

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from test_ranking_modes import decisions  # noqa: E402


class _Reserved(SlackPolicy):
    name = "augserve-slo/test-reserve"
    reserve = 2.0


def _waiting(rid: str, arrival: float) -> Request:
    return Request(rid, arrival_time=arrival, prompt_len=10)


def test_reserve_rejects_a_bad_rate() -> None:
    with pytest.raises(ValueError, match="rate"):
        RescueReserve(0.0)


def test_credit_accrues_at_the_rate_and_rescues_the_oldest_lost_first() -> None:
    res = RescueReserve(0.5)
    reqs = [_waiting(f"r{i}", float(i)) for i in range(4)]
    for r in reversed(reqs):
        res.track(r)
    lost = lambda r, now: r.arrival_time < 2.5  # noqa: E731
    assert res.due(10.0, lost) == []  # the first call only starts the clock
    assert res.due(11.0, lost) == []  # half a rescue's credit
    assert [r.request_id for r in res.due(12.0, lost)] == ["r0"]
    reqs[1].first_token_time = 12.5  # started meanwhile: no longer a candidate
    assert [r.request_id for r in res.due(14.0, lost)] == ["r2"]
    assert res.due(100.0, lost) == []  # r3 is not lost: nothing rescued, credit kept at 1
    assert res.credit == 1.0
    assert res.rescued == {"r0", "r2"} and res.count == 2
    res.forget("r0")
    assert res.rescued == {"r2"}


def test_rescued_requests_rank_first_and_stay_first() -> None:
    cfg = SchedulerConfig(policy="augserve-slo", num_device_blocks=64, max_batch_tokens=256)

    class _Load:
        def running_tokens(self) -> int:
            return 0

    pol = _Reserved(cfg, easy_profile(), _Load())
    old, new = _waiting("old", 0.0), _waiting("new", 5.0)
    for r in (old, new):
        r.pred_output_len = 10.0
        pol.on_arrival(r, r.arrival_time)
    pol.after_schedule([], set(), 5.0)
    assert pol.key(new, 5.0) < pol.key(old, 5.0)  # old is lost, new feasible
    pol.after_schedule([], set(), 6.0)  # 2 rescues of credit, capped at 1: old is rescued
    assert pol.is_rescued(old) and not pol.is_rescued(new)
    assert pol.key(old, 6.0) < pol.key(new, 6.0)
    old.first_token_time = 7.0  # still first after its first token (committed)
    assert pol.key(old, 8.0) < pol.key(new, 8.0)


def _overload(
    policy: type[SlackPolicy], monkeypatch: pytest.MonkeyPatch, n: int = 40
) -> list[Request]:
    """n equal requests, one every 0.1 s, on a server that runs one at a time (0.21 s
    each): twice its capacity; returns them when all are done."""
    monkeypatch.setitem(POLICIES, policy.name, policy)
    cfg = SchedulerConfig(policy=policy.name, num_device_blocks=64, max_batch_tokens=256,
                          max_num_seqs=1)  # fmt: skip
    driver = Driver(Scheduler(cfg, easy_profile(), OraclePredictor()), iter_time=0.01)
    pending = [Request(f"r{i:02d}", 0.1 * i, 10, [Segment(20)]) for i in range(n)]
    reqs = list(pending)
    while pending or driver.sched.num_live:
        while pending and pending[0].arrival_time <= driver.now + 1e-9:
            driver.add(pending.pop(0))
        driver.step()
    assert all(r.finish_reason is FinishReason.STOP for r in reqs)
    return reqs


def test_the_reserve_starts_old_requests_sooner_at_a_bounded_price(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class _Slow(SlackPolicy):
        name = "augserve-slo/test-reserve-slow"
        reserve = 0.5

    class _Plain(SlackPolicy):
        name = "augserve-slo/test-no-reserve"
        reserve = 0.0

    plain, reserved = _overload(_Plain, monkeypatch), _overload(_Slow, monkeypatch)

    def ttft(reqs: list[Request]) -> list[float]:
        return sorted(r.first_token_time - r.arrival_time for r in reqs)  # type: ignore[operator]

    # the worst waits shrink: the oldest lost requests are started while the overload lasts
    assert max(ttft(reserved)) < max(ttft(plain))
    on_time = lambda reqs: sum(t < 1.0 for t in ttft(reqs))  # noqa: E731
    # at 0.5 rescues/s over the ~4 s of arrivals, at most a few feasible requests lose out
    assert on_time(plain) - 3 <= on_time(reserved) <= on_time(plain)


@pytest.mark.parametrize("seed", [1, 2])
def test_incremental_ranking_decides_as_a_full_sort_with_a_reserve(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(POLICIES, _Reserved.name, _Reserved)
    rescued: list[str] = []
    due = RescueReserve.due

    def counting(self: RescueReserve, now: float, lost: Any) -> list[Request]:
        out = due(self, now, lost)
        rescued.extend(r.request_id for r in out)
        return out

    monkeypatch.setattr(RescueReserve, "due", counting)
    full = decisions(_Reserved.name, False, seed)
    assert len(full) > 100
    n = len(rescued)
    assert n > 5  # the reserve did rescue requests along the way
    assert decisions(_Reserved.name, True, seed) == full
    assert rescued[n:] == rescued[:n]  # the same requests, in the same order


def test_the_reserve_is_a_scheduler_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """`SchedulerConfig.slo_reserve` (`--set slo_reserve=R`) decides exactly as a policy
    whose own reserve is R, and 0 turns a policy's own reserve off (`augserve-slo`'s
    default of 0.05 included)."""
    monkeypatch.setitem(POLICIES, _Reserved.name, _Reserved)
    by_option = decisions("augserve-slo", True, 1, slo_reserve=_Reserved.reserve)
    assert by_option == decisions(_Reserved.name, True, 1)
    plain = decisions("augserve-slo", True, 1, slo_reserve=0.0)
    assert by_option != plain  # the reserve changed some decision
    assert decisions(_Reserved.name, True, 1, slo_reserve=0.0) == plain
    assert SlackPolicy.reserve == 0.05
    default = decisions("augserve-slo", True, 1)
    assert default == decisions("augserve-slo", True, 1, slo_reserve=0.05)
    with pytest.raises(ValueError, match="slo_reserve"):
        SchedulerConfig(slo_reserve=-0.1)
