"""Where a request's time goes before its first token, and how late the event loop runs.

A request carries a `StageClock` from its connection to its first token's bytes
handed to the connection. The HTTP protocol (`middleware.TimedH11Protocol`) marks
when the connection opened (its first request only) and when the request's head
began to arrive; the app marks the rest. Each mark is taken once (the first of a
request's `n` choices marks it), in this order:

    connected -> head       the client connected, then sent nothing yet (`connect`)
    head      -> arrived    the head parsed, the app's task started (`head`)
    arrived   -> read       the body received (`read`)
    read      -> handler    the body validated and routed (`validate`)
    handler   -> prep_start waiting for a preparation thread (`prep_queue`)
    prep_start-> prep_end   template, tokenizer, limits, grammars (`prepare`)
    prep_end  -> planned    the event loop picks the plan up (`to_loop`)
    planned   -> submitted  the response starts; `engine.generate` is called (`to_engine`)
    submitted -> first_out  the engine's first output: its queue and prefill (`engine`)
    first_out -> sent       the first event with it handed to the connection (`to_client`)

`/metrics` shows each as `augserve_request_stage_seconds{stage=...}`, observed once
a request's clock is complete from `arrived` on (a request that fails before its
first token is not observed; the two protocol stages where the protocol marked them:
not on a reused keep-alive connection's `connect`, nor under another HTTP protocol).
`LoopLag` measures the event loop itself: a task that sleeps a fixed interval and
records how late it wakes (`augserve_event_loop_lag_seconds`): any
work that holds the loop shows there, whoever does it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Histogram
from starlette.types import ASGIApp, Receive, Scope, Send

MARKS = (
    "connected", "head", "arrived", "read", "handler", "prep_start", "prep_end", "planned",
    "submitted", "first_out", "sent",
)  # fmt: skip
STAGES = (
    "connect", "head", "read", "validate", "prep_queue", "prepare", "to_loop", "to_engine",
    "engine", "to_client",
)  # fmt: skip
REQUIRED = MARKS[MARKS.index("arrived") :]  # the app's own marks
STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
SCOPE_KEY = "augserve.clock"


@dataclass
class StageClock:
    """One request's marks (module doc): monotonic seconds by mark name."""

    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, name: str, now: float | None = None) -> None:
        """Mark `name` now, unless it was marked before (the first choice's counts)."""
        if name in self.marks:  # the common case on the token path: nothing to do
            return
        if name not in MARKS:
            raise ValueError(f"unknown mark {name!r}; one of {MARKS}")
        self.marks[name] = time.monotonic() if now is None else now

    def durations(self) -> dict[str, float] | None:
        """Each stage's seconds where both its marks are taken; None while one of the
        app's own marks is missing."""
        if any(m not in self.marks for m in REQUIRED):
            return None
        pairs = zip(STAGES, MARKS[:-1], MARKS[1:], strict=True)
        return {
            s: max(0.0, self.marks[b] - self.marks[a])
            for s, a, b in pairs
            if a in self.marks and b in self.marks
        }


def clock_of(scope: Scope) -> StageClock:
    """The request's clock: the protocol's, else a fresh one; `arrived` marked now if
    it was not (a request the app sees without `ArrivalMiddleware`)."""
    clock = scope.get(SCOPE_KEY)
    if not isinstance(clock, StageClock):
        clock = StageClock()
        scope[SCOPE_KEY] = clock
    clock.mark("arrived")
    return clock


class ArrivalMiddleware:
    """Marks each HTTP request's arrival in the app (the outermost layer)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            clock_of(scope)
        await self.app(scope, receive, send)


class StageMetrics:
    """The stage histogram (module doc)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.seconds = Histogram(
            "augserve_request_stage_seconds",
            "Seconds a request spends in each stage up to its first token's bytes",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=registry,
        )
        self.lag = Histogram(
            "augserve_event_loop_lag_seconds",
            "How late the event loop's probe wakes, per probe",
            buckets=LAG_BUCKETS,
            registry=registry,
        )

    def observe(self, clock: StageClock | None) -> bool:
        """Observe a complete clock once; False if incomplete or observed before."""
        if clock is None or "observed" in clock.marks:
            return False
        durations = clock.durations()
        if durations is None:
            return False
        clock.marks["observed"] = time.monotonic()
        for stage, seconds in durations.items():
            self.seconds.labels(stage).observe(seconds)
        return True


class LoopLag:
    """A task that sleeps `interval` seconds at a time and observes how late it wakes."""

    def __init__(self, metrics: StageMetrics, interval: float = 0.05) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0, got {interval}")
        self.metrics = metrics
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            start = time.monotonic()
            await asyncio.sleep(self.interval)
            self.metrics.lag.observe(max(0.0, time.monotonic() - start - self.interval))


async def timed_events(
    events: AsyncIterator[str], clock: StageClock, stages: StageMetrics
) -> AsyncIterator[str]:
    """`events` as they are; once the first event made after the engine's first output
    has been handed on (the consumer asks for the next), marks `sent` and observes."""
    async with aclosing(events) as evs:  # type: ignore[type-var]
        async for event in evs:
            after_first = "first_out" in clock.marks
            yield event
            if after_first and "sent" not in clock.marks:
                clock.mark("sent")
                stages.observe(clock)
