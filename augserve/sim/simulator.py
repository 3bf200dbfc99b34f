"""Discrete-event simulator: the real `Scheduler` on a virtual clock (docs/design.md, executors).

Events are arrivals, call returns and iteration ends. The loop:

1. deliver every arrival and call return due at `now`, in time order (at equal
   times arrivals before returns, then in insertion order);
2. `out = sched.schedule(now)`;
3. if the iteration does work, it lasts
   `dt = profile.step_time(out.batch_shape(block_size))` (compute, plus the
   swap traffic beyond it: the host link overlaps compute);
   `upd = sched.update_from_output(out, results, now + dt)`, where each
   sampling chunk's result comes from the request's segment plan: the segment
   ends after `max(1, output_len)` generated tokens, with `StepEvent.CALL` if
   the segment has a call, else `StepEvent.FINISH`; every call in
   `upd.calls_started` returns `call_time` seconds later with `return_len`
   tokens (`sched.resume`);
4. if the iteration does nothing, the clock jumps to the next event.

The scheduler is built at the start of `run`, after a learned predictor is
wrapped in a `PrecomputedPredictor` (`precompute.py`): every prediction the
run will ask for is computed up front in large batches (same values, a
fraction of the cost). An `observer` sees every iteration's
`(end time, SchedulerOutput, SchedulerUpdate)`, as the engine's drivers
report theirs (the equivalence test compares the two).

Arrivals stop at `window`; serving stops at `window + drain`. Nothing here
reads the wall clock except the measurement of `schedule()`'s own run time
(the scheduling-overhead metric), which never feeds back into the simulation.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from augserve.core.config import SchedulerConfig
from augserve.core.latency import LatencyProfile
from augserve.core.prediction import Predictor
from augserve.core.request import FinishReason, Request
from augserve.sched.output import SchedulerOutput, SchedulerUpdate, StepEvent, StepResult
from augserve.sched.prefix_cache import PrefixCacheStats
from augserve.sched.scheduler import Scheduler
from augserve.sim.client_sessions import (
    client_results,
    next_turn,
    segment_ends,
    with_token_ids,
)
from augserve.sim.precompute import PrecomputedPredictor, should_precompute

Observer = Callable[[float, SchedulerOutput, SchedulerUpdate], None]

_ARRIVAL = 0
_RETURN = 1


def step_results(out: SchedulerOutput) -> dict[str, StepResult]:
    """A trace-driven executor's report: a segment ends after its planned output (a
    request absent from the report goes on: StepEvent.NONE is the scheduler's default)."""
    return {
        req.request_id: _CALL if seg is not None and seg.has_call else _FINISH
        for req, seg in segment_ends(out)
    }


_CALL = StepResult(event=StepEvent.CALL)
_FINISH = StepResult(event=StepEvent.FINISH)


@dataclass
class SimStats:
    """Counters of one run. `sched_wall_s` (wall time) and `sched_cpu_s` (this thread's CPU
    time) are measurements of this machine, not deterministic."""

    iterations: int = 0  # iterations that computed or swapped something
    empty_schedules: int = 0  # schedule() calls that returned nothing to do
    busy_time: float = 0.0  # virtual seconds spent in iterations
    swap_stall_time: float = 0.0  # virtual seconds of swap traffic beyond compute
    swapped_blocks: int = 0
    discards: int = 0
    calls: int = 0
    sched_wall_s: float = 0.0  # wall time inside schedule()
    sched_cpu_s: float = 0.0  # CPU time of the simulating thread inside schedule()
    sched_calls: int = 0
    end_time: float = 0.0  # virtual time when the run stopped
    stalled: bool = False  # runnable work, no event left, nothing schedulable
    prefix: PrefixCacheStats = field(default_factory=PrefixCacheStats)  # at the run's end

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix.hit_rate

    @property
    def sched_ms_per_iter(self) -> float:
        return 1000.0 * self.sched_wall_s / self.sched_calls if self.sched_calls else 0.0

    @property
    def sched_cpu_ms_per_iter(self) -> float:
        return 1000.0 * self.sched_cpu_s / self.sched_calls if self.sched_calls else 0.0


@dataclass
class SimResult:
    """Every request of the run, split into finished and unfinished."""

    requests: list[Request]
    finished: list[Request]
    unfinished: list[Request]  # live at the end (or finished in an iteration ending after it)
    not_arrived: list[Request]  # arrival at or after the window end (never offered)
    window: float
    drain: float
    stats: SimStats = field(default_factory=SimStats)

    @property
    def end(self) -> float:
        return self.window + self.drain


class Simulator:
    """Drives one `Scheduler` over a list of requests on a virtual clock."""

    def __init__(
        self,
        profile: LatencyProfile,
        config: SchedulerConfig,
        predictor: Predictor | None = None,
        check: bool = False,
        observer: Observer | None = None,
        client_sessions: bool = False,
        scheduler_profile: LatencyProfile | None = None,
    ) -> None:
        """`client_sessions`: calls run on the client, each turn a request of its own
        (`client_sessions.py`). `profile` times the iterations; `scheduler_profile` is
        what the scheduler believes of them (default `profile`: it knows the engine)."""
        self.profile = profile
        self.scheduler_profile = profile if scheduler_profile is None else scheduler_profile
        self.config = config
        self.predictor = predictor
        self.sched: Scheduler | None = None  # built by `run`
        self.block_size = config.block_size
        self.check = check  # run the scheduler invariants after every iteration (tests)
        self.observer = observer
        self.now = 0.0
        self.stats = SimStats()
        self._events: list[tuple[float, int, int, Request]] = []
        self._seq = 0
        self._finished: list[Request] = []
        self.client_sessions = client_sessions
        self._turns: list[Request] = []  # later turns of client sessions, as they were sent

    # --- events ------------------------------------------------------------------
    def _push(self, t: float, kind: int, req: Request) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, kind, self._seq, req))

    def _deliver_due(self, sched: Scheduler) -> None:
        events = self._events
        while events and events[0][0] <= self.now:
            t, kind, _, req = heapq.heappop(events)
            if kind == _ARRIVAL:
                upd = sched.add_request(req, t)
            else:
                seg = req.segments[req.segment_index]
                upd = sched.resume(req.request_id, seg.return_len, t)
            self._finished += [f.request for f in upd.finished]

    # --- one iteration -----------------------------------------------------------
    def iteration_time(self, out: SchedulerOutput) -> float:
        shape = out.batch_shape(self.block_size)
        dt = self.profile.step_time(shape)
        self.stats.swap_stall_time += dt - self.profile.iteration_time(shape)
        return dt

    def _step(self, sched: Scheduler) -> bool:
        """Schedule and run one iteration at `now`. False when there was nothing to do."""
        t0, c0 = time.perf_counter(), time.thread_time()
        out = sched.schedule(self.now)
        self.stats.sched_cpu_s += time.thread_time() - c0
        self.stats.sched_wall_s += time.perf_counter() - t0
        self.stats.sched_calls += 1
        self.stats.discards += len(out.discarded)
        if out.is_empty:
            self.stats.empty_schedules += 1
            return False
        end = self.now + self.iteration_time(out)
        results = client_results(out) if self.client_sessions else step_results(out)
        upd = sched.update_from_output(out, results, end)
        if self.client_sessions:
            self._send_next_turns(out, results, end)
        self.stats.discards += len(upd.kv_discarded)  # vLLM's discards at call start
        for call in upd.calls_started:
            self.stats.calls += 1
            seg = call.request.current_segment
            self._push(end + ((seg.call_time if seg else None) or 0.0), _RETURN, call.request)
        self._finished += [f.request for f in upd.finished]
        self.stats.iterations += 1
        self.stats.busy_time += end - self.now
        self.stats.swapped_blocks += len(out.swap_out) + len(out.swap_in)
        if self.observer is not None:
            self.observer(end, out, upd)
        if self.check:
            from augserve.sched.invariants import check_invariants

            check_invariants(sched, out, self._finished)
        self.now = end
        return True

    def _send_next_turns(
        self, out: SchedulerOutput, results: dict[str, StepResult], end: float
    ) -> None:
        """Every turn that ended with "tool_calls": the client sends the next one when
        its tool returns."""
        for chunk in out.chunks:
            res = results.get(chunk.request_id)
            if res is not None and res.finish_reason is FinishReason.TOOL_CALLS:
                old = chunk.request
                seg = old.segments[old.segment_index]
                turn = int(old.request_id.rsplit("/", 1)[1]) + 1 if "/" in old.request_id else 1
                nxt = next_turn(old, turn, end + (seg.call_time or 0.0))
                self._turns.append(nxt)
                self._push(nxt.arrival_time, _ARRIVAL, nxt)

    # --- the run -----------------------------------------------------------------
    def run(self, requests: Iterable[Request], window: float, drain: float = 0.0) -> SimResult:
        """Offer the requests arriving before `window`; serve until `window + drain`."""
        if window <= 0:
            raise ValueError(f"window must be > 0, got {window}")
        if drain < 0:
            raise ValueError(f"drain must be >= 0, got {drain}")
        reqs = sorted(requests, key=lambda r: r.arrival_time)
        if self.client_sessions:
            reqs = [with_token_ids(r) for r in reqs]
        offered = [r for r in reqs if r.arrival_time < window]
        predictor = self.predictor
        if predictor is not None and should_precompute(predictor):
            predictor = PrecomputedPredictor(predictor, offered)
        sched = self.sched = Scheduler(self.config, self.scheduler_profile, predictor)
        for req in offered:
            self._push(req.arrival_time, _ARRIVAL, req)
        stop = window + drain
        while self.now < stop:
            self._deliver_due(sched)
            if sched.has_runnable() and self._step(sched):
                continue  # the clock moved to the iteration's end
            if not self._events:
                self.stats.stalled = sched.has_runnable()
                break
            self.now = min(stop, max(self.now, self._events[0][0]))
        self.stats.end_time = self.now
        if sched.prefix is not None:
            self.stats.prefix = replace(sched.prefix.stats)  # a copy: the cache's own goes on
        return self._result(reqs, offered + self._turns, window, drain)

    def _result(
        self, reqs: list[Request], offered: list[Request], window: float, drain: float
    ) -> SimResult:
        stop = window + drain

        def done(r: Request) -> bool:
            return r.is_finished and r.finish_time is not None and r.finish_time <= stop

        finished = [r for r in offered if done(r)]
        unfinished = [r for r in offered if not done(r)]
        not_arrived = [r for r in reqs if r.arrival_time >= window]
        every = reqs + self._turns
        return SimResult(every, finished, unfinished, not_arrived, window, drain, self.stats)


def simulate(
    requests: Iterable[Request],
    profile: LatencyProfile,
    config: SchedulerConfig,
    window: float,
    drain: float = 0.0,
    predictor: Predictor | None = None,
    check: bool = False,
    observer: Observer | None = None,
) -> SimResult:
    """One run: `Simulator(profile, config, predictor).run(requests, window, drain)`."""
    return Simulator(profile, config, predictor, check, observer).run(requests, window, drain)
