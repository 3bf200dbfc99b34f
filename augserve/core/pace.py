"""The engine's pace: how much slower (or faster) than its latency profile the served
engine really runs, measured from its own iterations
(docs/scheduler.md, "Following the engine's pace").

A profile is fitted on a grid of batch shapes at start-up; the batches a server then
runs are not the grid's (sessions mix contexts of 200 and 1,900 tokens, the machine
gets busier), and the engine can run 1.6-2x its profile for good
(docs/results-vs-vllm.md, "sessions-q1 in the simulator"). Every decision the
scheduler prices in time (an SLO policy's deadlines, the context policy at a call,
the decode iteration behind aging) then believes a faster engine than it has.

`PaceMeter` compares each busy iteration's wall time with what the profile in use
predicts for its batch. Over a window of `window` iterations the reading is the sum of
the measured times over the sum of the predicted ones (long iterations weigh more, as
they do in the schedule); the pace follows the readings with weight `smoothing`,
within [`low`, `high`], and is reported as changed only when it moved by more than
`tolerance` from the pace in use (so the scheduler is not repriced every window). The
engine prices with `profile.scaled(pace)` from then on. Pure arithmetic, no clock:
the engine times its iterations (layer 3) and feeds them here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaceConfig:
    """How the engine's pace is read (module doc). `window` 0 turns it off."""

    window: int = 64
    smoothing: float = 0.5
    tolerance: float = 0.1
    low: float = 0.5
    high: float = 4.0

    def __post_init__(self) -> None:
        if self.window < 0:
            raise ValueError(f"PaceConfig.window must be >= 0, got {self.window}")
        if not 0.0 < self.smoothing <= 1.0:
            raise ValueError(f"PaceConfig.smoothing must be in (0, 1], got {self.smoothing}")
        if self.tolerance < 0:
            raise ValueError(f"PaceConfig.tolerance must be >= 0, got {self.tolerance}")
        if not 0.0 < self.low <= 1.0:
            raise ValueError(f"PaceConfig.low must be in (0, 1], got {self.low}")
        if self.high < 1.0:
            raise ValueError(f"PaceConfig.high must be >= 1, got {self.high}")

    @property
    def enabled(self) -> bool:
        return self.window > 0


class PaceMeter:
    """Measured over predicted iteration time, window by window (module doc)."""

    def __init__(self, config: PaceConfig | None = None) -> None:
        self.config = config or PaceConfig()
        self.reset()

    def reset(self) -> None:
        """Start from pace 1 (also when the base profile changes: the start-up fit)."""
        self.pace = 1.0  # the pace the scheduler prices with
        self.estimate = 1.0  # the smoothed readings, before the tolerance
        self.readings = 0
        self._measured = 0.0
        self._predicted = 0.0
        self._count = 0

    def observe(self, predicted_s: float, measured_s: float) -> float | None:
        """One busy iteration: what the base profile predicted for its batch and what it
        took. Returns the new pace when it changed (the caller reprices), else None."""
        if predicted_s <= 0 or measured_s < 0:
            return None  # nothing was computed, or a clock went back
        self._measured += measured_s
        self._predicted += predicted_s
        self._count += 1
        if self._count < self.config.window:
            return None
        reading = self._measured / self._predicted
        self._measured = self._predicted = 0.0
        self._count = 0
        return self._read(reading)

    def _read(self, reading: float) -> float | None:
        c = self.config
        self.readings += 1
        self.estimate += c.smoothing * (reading - self.estimate)
        self.estimate = min(c.high, max(c.low, self.estimate))
        if abs(self.estimate / self.pace - 1.0) <= c.tolerance:
            return None
        self.pace = self.estimate
        return self.pace
