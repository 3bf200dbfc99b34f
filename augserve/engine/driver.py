"""TraceDriver: replay requests with scripted calls on an `LLMEngine`, in real or virtual time.

One loop serves the offline `LLM` (`generate`, `run_trace`), the engine
backend of `augserve bench` and the equivalence test against the simulator:

1. deliver every arrival and call return due at `now`, in time order (at
   equal times arrivals before returns, then in insertion order: the
   simulator's rule);
2. `out = engine.schedule(now)`; if it does work, `execute` it and `commit`
   it at the iteration's end: the wall clock after the forward
   (`RealClock`), or `now + profile.step_time(batch)` (`VirtualClock`, the
   simulator's time model);
3. every call that started returns `duration * time_scale` after its start;
4. with nothing to do, wait (sleep, or jump the virtual clock) to the next
   event.

The driver reads the engine's reports only (outputs, finishes, calls); it
never looks into the scheduler.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from augserve.core.latency import LatencyProfile
from augserve.core.request import Request
from augserve.engine.engine import LLMEngine
from augserve.engine.outputs import RequestOutput
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tools import PendingCall
from augserve.sched.output import SchedulerOutput, SchedulerUpdate

Observer = Callable[[float, SchedulerOutput, SchedulerUpdate], None]
_ARRIVAL, _RETURN = 0, 1


class Clock(Protocol):
    def now(self) -> float: ...
    def step_end(self, start: float, out: SchedulerOutput) -> float: ...
    def wait_until(self, t: float) -> float: ...


class RealClock:
    """Wall time since construction, divided by `time_scale` (trace seconds)."""

    def __init__(self, time_scale: float = 1.0, max_sleep: float = 0.05) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self.time_scale = time_scale
        self.max_sleep = max_sleep
        self._t0 = time.perf_counter()

    def now(self) -> float:
        return (time.perf_counter() - self._t0) / self.time_scale

    def step_end(self, start: float, out: SchedulerOutput) -> float:
        return self.now()

    def wait_until(self, t: float) -> float:
        wait = (t - self.now()) * self.time_scale
        time.sleep(min(max(0.0, wait), self.max_sleep))
        return self.now()


class VirtualClock:
    """Simulated time: an iteration lasts what the latency profile says."""

    def __init__(self, profile: LatencyProfile, block_size: int) -> None:
        self.profile = profile
        self.block_size = block_size
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def step_end(self, start: float, out: SchedulerOutput) -> float:
        self.t = start + self.profile.step_time(out.batch_shape(self.block_size))
        return self.t

    def wait_until(self, t: float) -> float:
        self.t = max(self.t, t)
        return self.t


@dataclass(frozen=True)
class Arrival:
    """A request (its `token_ids` hold the prompt) that arrives at `time` (clock seconds)."""

    time: float
    request: Request
    params: SamplingParams


@dataclass
class DriverStats:
    iterations: int = 0
    busy_time: float = 0.0  # clock seconds inside iterations
    end_time: float = 0.0
    calls: int = 0
    stalled: bool = False  # work left that can neither run nor wait for an event
    step_times: list[float] = field(default_factory=list)


class TraceDriver:
    """Runs an engine over timed arrivals; scripted calls return on the same clock."""

    def __init__(
        self,
        engine: LLMEngine,
        clock: Clock,
        time_scale: float = 1.0,
        observer: Observer | None = None,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.time_scale = time_scale  # call durations are multiplied by this
        self.observer = observer
        self.stats = DriverStats()
        self.outputs: dict[str, RequestOutput] = {}  # final outputs by request id
        self._events: list[tuple[float, int, int, Arrival | PendingCall]] = []
        self._seq = itertools.count()

    def _push(self, t: float, kind: int, item: Arrival | PendingCall) -> None:
        heapq.heappush(self._events, (t, kind, next(self._seq), item))

    def run(self, arrivals: Sequence[Arrival], until: float = math.inf) -> DriverStats:
        """Serve until every request finished, or `until` (clock seconds)."""
        for a in arrivals:
            self._push(a.time, _ARRIVAL, a)
        now = self.clock.now()
        while now < until and (self._events or self.engine.has_unfinished()):
            self._deliver(now)
            if self.engine.has_runnable():
                stepped = self._step(now)
                if stepped is not None:
                    now = stepped
                    continue
            if not self._events:
                self.stats.stalled = self.engine.has_unfinished()
                break
            now = self.clock.wait_until(min(until, self._events[0][0]))
        self._collect(self.engine.flush().outputs)  # e.g. rejected at arrival, nothing ran
        self.stats.end_time = self.clock.now()
        return self.stats

    def _deliver(self, now: float) -> None:
        engine, events = self.engine, self._events
        while events and events[0][0] <= now:
            t, kind, _, item = heapq.heappop(events)
            if isinstance(item, Arrival):
                engine.add(item.request, item.params, now=t, stream=False)
            else:
                assert item.scripted is not None
                engine.resume(item.request_id, list(item.scripted.token_ids), now=t)

    def _step(self, now: float) -> float | None:
        """One iteration at `now`; its end time, or None if it did nothing."""
        engine = self.engine
        out = engine.schedule(now)
        if out.is_empty:
            self._collect(engine.commit(out, {}, now).outputs)
            return None
        t0 = time.perf_counter()
        results = engine.execute(out)
        end = self.clock.step_end(now, out)
        step = engine.commit(out, results, end)
        self.stats.step_times.append(time.perf_counter() - t0)
        self.stats.iterations += 1
        self.stats.busy_time += end - now
        for call in step.calls:
            if call.scripted is None:
                raise ValueError(
                    f"call of {call.request_id}: the trace driver runs scripted calls only; "
                    "use AsyncLLMEngine for tool executors"
                )
            self.stats.calls += 1
            self._push(call.start + call.scripted.duration * self.time_scale, _RETURN, call)
        self._collect(step.outputs)
        if self.observer is not None and step.update is not None:
            self.observer(end, out, step.update)
        return end

    def _collect(self, outputs: list[RequestOutput]) -> None:
        for o in outputs:
            if o.finished:
                self.outputs[o.request_id] = o
