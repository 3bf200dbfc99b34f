"""The persistent queues give exactly the order a full sort by the policy's key gives."""

from __future__ import annotations

import random

import pytest
from driver import easy_profile
from hypothesis import given, settings
from hypothesis import strategies as st

from augserve.core.config import SchedulerConfig
from augserve.core.request import Request
from augserve.sched.kinetic import KineticQueue
from augserve.sched.policies.augserve import AugServePolicy
from augserve.sched.ranking import HeapQueue


class _Load:
    def running_tokens(self) -> int:
        return 0


def _line_key(bk: float, cost: dict[str, float]):
    """AugServe's key for a request whose cost is `cost[id]`."""

    def key(req: Request, now: float) -> tuple:
        value = 1.0 + bk * (now - req.last_scheduled_time)
        return (-(value / cost[req.request_id]), req.queue_time, req.request_id)

    return key


ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "add", "remove", "time"]),
        st.integers(0, 40),  # which request
        st.sampled_from([1.0, 1.0, 2.0, 3.5, 10.0, 0.5]),  # its cost (ties are common)
        st.sampled_from([0.0, 0.0, 0.1, 0.25, 3.0]),  # how far time moves
    ),
    max_size=120,
)


@settings(max_examples=200, deadline=None)
@given(ops, st.sampled_from([0.05, 1.0, 30.0]))
def test_kinetic_queue_matches_a_sort_at_every_time(operations, bk):
    cost: dict[str, float] = {}
    key = _line_key(bk, cost)
    q = KineticQueue(bk, lambda r: cost[r.request_id])
    reqs: dict[str, Request] = {}
    now = 0.0
    for op, i, c, dt in operations:
        rid = f"r{i:02d}"
        if op == "add":
            req = Request(rid, arrival_time=round(now * 7) % 3, prompt_len=1)  # qtime ties
            req.last_scheduled_time = now
            cost[rid] = c
            reqs[rid] = req
            q.add(req, now)
        elif op == "remove" and rid in reqs:
            q.remove(reqs.pop(rid))
        else:
            now += dt
        want = sorted(reqs.values(), key=lambda r: key(r, now))
        assert q.ordered(now) == want
        q.check(now)
    assert len(q) == len(reqs)


def test_kinetic_queue_swaps_when_lines_cross():
    cost = {"cheap": 1.0, "dear": 4.0}
    q = KineticQueue(1.0, lambda r: cost[r.request_id])
    dear = Request("dear", 0.0, 1)  # waiting since t = 0: v = (1 + t) / 4
    cheap = Request("cheap", 0.0, 1)
    cheap.last_scheduled_time = 10.0  # v = 1 + t - 10: equal to dear's at t = 37 / 3
    q.add(dear, 10.0)
    q.add(cheap, 10.0)
    assert [r.request_id for r in q.ordered(12.3)] == ["dear", "cheap"]
    assert q.swaps == 0
    assert [r.request_id for r in q.ordered(12.4)] == ["cheap", "dear"]
    assert q.swaps == 1


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "remove", "rekey"]), st.integers(0, 30))))
def test_heap_queue_matches_a_sort(operations):
    rank: dict[str, int] = {}
    q = HeapQueue(lambda r, now: (rank[r.request_id], r.request_id))
    reqs: dict[str, Request] = {}
    rng = random.Random(0)
    for op, i in operations:
        rid = f"r{i:02d}"
        if op == "add":
            rank[rid] = rng.randint(0, 5)
            reqs[rid] = Request(rid, 0.0, 1)
            q.add(reqs[rid], 0.0)
        elif op == "remove" and rid in reqs:
            q.remove(reqs.pop(rid))
        elif rid in reqs:
            rank[rid] = rng.randint(0, 5)
            q.rekey(reqs[rid], 0.0)
        want = sorted(reqs.values(), key=lambda r: (rank[r.request_id], r.request_id))
        assert q.ordered(0.0) == want
        assert q.ordered(0.0) == want  # reading does not consume


@pytest.mark.parametrize("segment_cost", [False, True])
def test_augserve_key_is_minus_density_bit_for_bit(segment_cost):
    cfg = SchedulerConfig(policy="augserve", beta=5e-5, segment_cost=segment_cost)
    pol = AugServePolicy(cfg, easy_profile(), _Load())
    rng = random.Random(1)
    for i in range(200):
        req = Request(f"r{i}", rng.uniform(0, 100), rng.randint(1, 3000))
        req.pred_output_len = rng.choice([0.0, 1.0, 37.0, 412.5])
        req.pred_call_time = rng.choice([None, 0.2, 9.0])
        pol.on_arrival(req, req.arrival_time)
        req.segment_generated = rng.randint(0, 500)
        req.num_tokens += req.segment_generated
        now = req.arrival_time + rng.uniform(0, 50)
        assert pol.key(req, now) == (-pol.density(req, now), req.queue_time, req.request_id)
        assert pol.current_cost(req) == pol.cost(req.request_id)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 12),  # last scheduled at 1000 s + j us
            st.integers(0, 6),  # cost = 7 (1 + k 1e-9): near-parallel lines that
        ),  # cross between 1000 and 13,000 s
        min_size=2,
        max_size=40,
    ),
    st.lists(st.floats(0.0, 12_000.0), min_size=1, max_size=30),
)
def test_kinetic_queue_is_exact_for_nearly_parallel_lines(lines, times):
    # crossing times of near-equal costs suffer cancellation: the certificates must
    # still fire no later than the float keys a sort compares invert
    bk = 0.05  # beta 5e-5 per ms
    cost: dict[str, float] = {}
    key = _line_key(bk, cost)
    q = KineticQueue(bk, lambda r: cost[r.request_id])
    reqs = []
    for i, (j, k) in enumerate(lines):
        req = Request(f"r{i:02d}", arrival_time=0.0, prompt_len=1)
        req.last_scheduled_time = 1000.0 + j * 1e-6
        cost[req.request_id] = 7.0 * (1.0 + k * 1e-9)
        reqs.append(req)
        q.add(req, 1000.0)
    for now in sorted(1000.0 + t for t in times):
        assert q.ordered(now) == sorted(reqs, key=lambda r: key(r, now))


@settings(max_examples=120, deadline=None)
@given(
    st.integers(1, 400),  # queued requests: small heaps walk, large ones take the vector pass
    st.lists(  # the scan's moves: ("pop",) or ("skip", i): skip below the key of sorted[i]
        st.one_of(st.just(("pop", 0)), st.tuples(st.just("skip"), st.integers(0, 400))),
        max_size=12,
    ),
    st.integers(0, 2**32 - 1),
)
def test_kinetic_scan_skip_below_matches_a_sorted_list(size, moves, seed):
    # what the packer does while memory comes and goes: pop some, skip below the key of
    # the last request offered; the scan must then yield exactly the rest of the sort
    rng = random.Random(seed)
    bk = 0.05
    cost: dict[str, float] = {}
    key = _line_key(bk, cost)
    q = KineticQueue(bk, lambda r: cost[r.request_id])
    reqs = []
    for i in range(size):
        req = Request(f"r{i:03d}", arrival_time=float(rng.randint(0, 3)), prompt_len=1)
        req.last_scheduled_time = rng.choice([0.0, 1.0, rng.uniform(0.0, 5.0)])
        cost[req.request_id] = rng.choice([1.0, 2.0, rng.uniform(0.5, 50.0)])  # ties too
        reqs.append(req)
        q.add(req, 5.0)
    now = 5.0 + rng.choice([0.0, 0.5, 40.0])
    want = sorted(reqs, key=lambda r: key(r, now))
    scan, at = q.scan(now), 0  # `at`: index in `want` of the next request to yield
    for move, i in moves:
        if move == "pop":
            if at < len(want):
                assert scan.peek() == (key(want[at], now), want[at])
                scan.pop()
                at += 1
        else:
            bound = key(want[min(i, size - 1)], now)
            bound = bound if i < size else (bound[0], bound[1], bound[2] + "~")  # past all
            scan.skip_below(bound)
            at = max(at, sum(key(r, now) < bound for r in want))
    rest = []
    while (top := scan.peek()) is not None:
        rest.append(top[1])
        scan.pop()
    assert rest == want[at:]
