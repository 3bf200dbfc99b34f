"""MARS's persistent queue read past its sorted top after a removal (a regression test:
the scan used to skip as many requests as had left the sorted top since the sort)."""

from __future__ import annotations

from augserve.core.request import ContextPolicy, Request, RequestStatus
from augserve.sched.policies.mars_queue import MARSQueue
from augserve.sched.policies.mars_rank import BoostClock, Round, ScoreParams


def _queue(n: int) -> tuple[MARSQueue, list[Request]]:
    rounds: dict[str, Round] = {}
    reqs = []
    for i in range(n):
        req = Request(f"r{i:02d}", arrival_time=float(i), prompt_len=10)
        # scores rise with i but arrivals are shuffled against them: order is by score
        rounds[req.request_id] = Round(1 + i, 1, ContextPolicy.PRESERVE, 0.0, True)
        reqs.append(req)
    queue = MARSQueue(rounds, BoostClock(100, 100_000), lambda: 384, ScoreParams(True, 0.01, 2.0))
    for req in reversed(reqs):
        queue.add(req, 0.0)
    return queue, reqs


def test_a_scan_past_the_sorted_top_after_a_removal_skips_nobody() -> None:
    queue, reqs = _queue(12)
    queue.TOP = 2  # sort only the top 2 of the waiting requests
    assert queue.ordered(0.0) == reqs  # the first scan sorts (partially, then extends)
    queue.advance(0.0)
    queue._sort()  # as the next iteration's first scan would, before the admissions
    assert queue._partial
    admitted = reqs[0]
    admitted.status = RequestStatus.RUNNING  # the packer scheduled it: it leaves the queue
    queue.remove(admitted)
    assert queue.ordered(0.0) == reqs[1:]  # no re-sort: the old top, then the rest


def test_the_scan_stays_in_step_when_the_top_has_several_removals() -> None:
    queue, reqs = _queue(20)
    queue.TOP = 3
    queue.advance(0.0)
    queue._sort()
    for req in (reqs[0], reqs[2]):
        req.status = RequestStatus.RUNNING
        queue.remove(req)
    assert queue.ordered(0.0) == [r for i, r in enumerate(reqs) if i not in (0, 2)]
