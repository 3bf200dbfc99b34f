"""The served engine's latency model follows its measured pace (`core/pace.py`).

`EnginePace` holds the base profile (the fitted, cached or given one), times each busy
iteration of `LLMEngine.step` against what the base predicts for its batch, and when
the meter's pace moves it puts `base.scaled(pace)` behind the engine's
`SwitchableLatency` and tells the scheduler (`Scheduler.latency_changed`). A base that
is not a `LatencyProfile` (a custom `LatencyModel`) cannot be scaled: no pace then.
"""

from __future__ import annotations

import logging

from augserve.core.latency import LatencyModel, LatencyProfile
from augserve.core.pace import PaceConfig, PaceMeter
from augserve.engine.background_fit import SwitchableLatency
from augserve.sched.output import SchedulerOutput

log = logging.getLogger(__name__)


class EnginePace:
    """Measured iterations in, a rescaled latency model out (module doc)."""

    def __init__(self, latency: SwitchableLatency, config: PaceConfig, block_size: int) -> None:
        if not config.enabled:
            raise ValueError("EnginePace needs PaceConfig.window > 0")
        self.latency = latency
        self.meter = PaceMeter(config)
        self.block_size = block_size
        self.base: LatencyProfile | None = None
        self.rebase(latency.current)

    @property
    def pace(self) -> float:
        return self.meter.pace

    def rebase(self, base: LatencyModel) -> None:
        """A new base model (the start-up fit's): priced as it is, the pace read anew."""
        self.base = base if isinstance(base, LatencyProfile) else None
        self.meter.reset()
        self.latency.current = base

    def observe(self, out: SchedulerOutput, seconds: float) -> bool:
        """One iteration took `seconds` of wall time (swaps and forward). True when the
        latency model was repriced (the caller refreshes the scheduler)."""
        if self.base is None or out.is_empty:
            return False
        predicted = self.base.step_time(out.batch_shape(self.block_size))
        pace = self.meter.observe(predicted, seconds)
        if pace is None:
            return False
        self.latency.current = self.base.scaled(pace)
        log.info("latency model: the engine runs %.2fx its profile; repriced", pace)
        return True
