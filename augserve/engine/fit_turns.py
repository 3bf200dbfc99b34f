"""When a piece of the background latency fit runs (`background_fit.py`), counted by
the async engine's loop (`async_engine.py`): at once while the engine idles, else after
every `FIT_EVERY` steps that computed, so requests slow down by a bounded share."""

from __future__ import annotations

FIT_EVERY = 32  # busy steps between two pieces of a background latency fit


class FitTurns:
    """Busy steps since the last piece of the fit."""

    def __init__(self, every: int = FIT_EVERY) -> None:
        if every < 1:
            raise ValueError(f"every: must be >= 1, got {every}")
        self.every = every
        self.busy_steps = 0

    def stepped(self, idle: bool) -> None:
        """A step ended: an idle one restarts the count."""
        self.busy_steps = 0 if idle else self.busy_steps + 1

    def due(self, pending: bool) -> bool:
        """With a fit `pending`, `every` busy steps have run since its last piece."""
        return pending and self.busy_steps >= self.every

    def turn(self, pending: bool, idle: bool) -> bool:
        """Whether a piece of a `pending` fit runs now, after a step (`idle`: it
        computed nothing, or there was none); a turn restarts the count."""
        if not pending:
            return False
        if idle or self.busy_steps == 0 or self.busy_steps >= self.every:
            self.busy_steps = 0
            return True
        return False
