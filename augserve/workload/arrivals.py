"""Arrival processes: Poisson, and Gamma with a coefficient of variation.

Interarrival gaps are i.i.d.: exponential with mean 1/rate (Poisson), or
Gamma with shape k = 1/CV^2 and scale 1/(rate k) (mean 1/rate, CV as given;
CV = 1 is Poisson). Times start at `start` + the first gap. All functions take
a seed (or a `numpy.random.Generator`) and are reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ArrivalConfig:
    """An arrival process: `rate` requests/s, interarrival coefficient of variation `cv`."""

    rate: float
    cv: float = 1.0

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"ArrivalConfig.rate must be > 0, got {self.rate}")
        if not self.cv > 0:
            raise ValueError(f"ArrivalConfig.cv must be > 0, got {self.cv}")

    def gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.cv == 1.0:
            return rng.exponential(1.0 / self.rate, size=n)
        shape = 1.0 / (self.cv * self.cv)
        return rng.gamma(shape, 1.0 / (self.rate * shape), size=n)


def _rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def arrival_times(
    config: ArrivalConfig, n: int, seed: int | np.random.Generator | None = 0, start: float = 0.0
) -> list[float]:
    """Arrival times of `n` requests."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return [float(t) for t in start + np.cumsum(config.gaps(n, _rng(seed)))]


def arrival_times_until(
    config: ArrivalConfig,
    duration: float,
    seed: int | np.random.Generator | None = 0,
    start: float = 0.0,
) -> list[float]:
    """Arrival times in [start, start + duration)."""
    if duration < 0:
        raise ValueError(f"duration must be >= 0, got {duration}")
    rng = _rng(seed)
    times: list[float] = []
    t = start
    batch = max(16, int(config.rate * duration * 1.2) + 16)
    while True:
        for gap in config.gaps(batch, rng):
            t += float(gap)
            if t >= start + duration:
                return times
            times.append(t)


def poisson_arrivals(
    rate: float,
    n: int | None = None,
    duration: float | None = None,
    seed: int | np.random.Generator | None = 0,
    start: float = 0.0,
) -> list[float]:
    """Poisson arrivals at `rate`: for `n` requests or over `duration` seconds."""
    return gamma_arrivals(rate, 1.0, n, duration, seed, start)


def gamma_arrivals(
    rate: float,
    cv: float,
    n: int | None = None,
    duration: float | None = None,
    seed: int | np.random.Generator | None = 0,
    start: float = 0.0,
) -> list[float]:
    """Gamma arrivals (shape 1/cv^2) at `rate`: for `n` requests or over `duration`."""
    if (n is None) == (duration is None):
        raise ValueError("give exactly one of n and duration")
    config = ArrivalConfig(rate, cv)
    if duration is not None:
        return arrival_times_until(config, duration, seed, start)
    return arrival_times(config, n or 0, seed, start)
