"""The comparison protocol's statistics (docs/benchmarking.md; the config and result
file: `augserve/bench/protocol.py`).

- `mean_interval`: a mean and its two-sided 95% Student-t interval.
- `crossing` / `capacity`: SLO capacity, the rate where the linearly interpolated
  attainment curve first falls through 90%, and its interval from the per-repeat
  crossings (`capacity_ratio`: the paired per-repeat ratio of two systems';
  `ratio_lower_bound`: its conservative one-sided bound where censoring removes the
  interval).

Pure functions over numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FLOOR = 0.9  # the attainment that defines SLO capacity
# two-sided 95% Student-t critical values t_{0.975, df}, df = 1..30
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def t95(df: int) -> float:
    """t_{0.975, df}; 1.96 past df 30 (within 2% of the exact value from there on)."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    return _T95[df - 1] if df <= len(_T95) else 1.96


@dataclass(frozen=True)
class Interval:
    """A mean over `n` values and its 95% t interval [low, high] (nan when n < 2)."""

    mean: float
    low: float
    high: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None

        return {"mean": num(self.mean), "low": num(self.low), "high": num(self.high), "n": self.n}


def mean_interval(values: Sequence[float]) -> Interval:
    """Mean and mean +- t_{0.975, n-1} * s / sqrt(n), s the sample standard deviation."""
    n = len(values)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = sum(values) / n
    if n < 2:
        return Interval(mean, math.nan, math.nan, 1)
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t95(n - 1) * s / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


@dataclass(frozen=True)
class Crossing:
    """Where an attainment curve first falls below the floor: `rate` interpolated
    between the two rates around it; `censored` is "" (crossed inside the grid),
    "below" (already under the floor at the lowest rate: capacity < rates[0]) or
    "above" (never under it: capacity >= rates[-1]); `rate` is that grid end."""

    rate: float
    censored: str = ""


def crossing(rates: Sequence[float], attainment: Sequence[float], floor: float = FLOOR) -> Crossing:
    """The first downward crossing of `floor` by the curve through (rate, attainment),
    rates ascending; linear between neighbours. A curve that comes back above the
    floor later does not move it: capacity is the load held from the lowest rate on."""
    if len(rates) != len(attainment) or not rates:
        raise ValueError("rates and attainment must be non-empty and of equal length")
    if any(b <= a for a, b in zip(rates, rates[1:], strict=False)):
        raise ValueError(f"rates must be strictly ascending, got {list(rates)}")
    if attainment[0] < floor:
        return Crossing(rates[0], "below")
    for k in range(1, len(rates)):
        a0, a1 = attainment[k - 1], attainment[k]
        if a1 < floor:
            r0, r1 = rates[k - 1], rates[k]
            return Crossing(r0 + (a0 - floor) / (a0 - a1) * (r1 - r0))
    return Crossing(rates[-1], "above")


@dataclass(frozen=True)
class Capacity:
    """SLO capacity of one system: `rate` from the mean attainment curve, and the
    t interval over the per-repeat curves' crossings (`per_repeat`); `censored` as
    in `Crossing`, for the mean curve, or "repeat" when a repeat's crossing is
    censored (its interval is then nan: widen the rate grid)."""

    rate: float
    interval: Interval
    per_repeat: tuple[float, ...]
    censored: str = ""
    per_repeat_censored: tuple[str, ...] = ()  # each repeat's `Crossing.censored`

    def to_dict(self) -> dict[str, Any]:
        iv = self.interval.to_dict()
        return {"rate": self.rate, "censored": self.censored, "interval": iv,
                "per_repeat": list(self.per_repeat),
                "per_repeat_censored": list(self.per_repeat_censored)}  # fmt: skip


def capacity(
    rates: Sequence[float], per_repeat: Sequence[Sequence[float]], floor: float = FLOOR
) -> Capacity:
    """`per_repeat[k][r]`: attainment at `rates[k]` in repeat r (every rate the same
    number of repeats)."""
    if len({len(v) for v in per_repeat}) != 1:
        raise ValueError("every rate needs the same number of repeats")
    repeats = len(per_repeat[0])
    means = [sum(v) / repeats for v in per_repeat]
    mean_cross = crossing(rates, means, floor)
    crosses = [crossing(rates, [v[r] for v in per_repeat], floor) for r in range(repeats)]
    values = tuple(c.rate for c in crosses)
    censored = mean_cross.censored or ("repeat" if any(c.censored for c in crosses) else "")
    iv = mean_interval(values)
    if censored:
        iv = Interval(iv.mean, math.nan, math.nan, iv.n)
    return Capacity(mean_cross.rate, iv, values, censored, tuple(c.censored for c in crosses))


def capacity_ratio(ours: Capacity, baseline: Capacity) -> dict[str, Any]:
    """Our capacity over the baseline's: the mean curves' ratio and the t interval of
    the paired per-repeat ratios (repeat r of both ran the same seeded workloads)."""
    if len(ours.per_repeat) != len(baseline.per_repeat):
        raise ValueError("capacity_ratio: both systems need the same repeats")
    ratios = [a / b for a, b in zip(ours.per_repeat, baseline.per_repeat, strict=True)]
    iv = mean_interval(ratios)
    censored = bool(ours.censored or baseline.censored)
    lower = ratio_lower_bound(ours, baseline, iv)
    if censored:
        iv = Interval(iv.mean, math.nan, math.nan, iv.n)
    return {"ratio": ours.rate / baseline.rate, "censored": censored, "per_repeat": ratios,
            "interval": iv.to_dict(), "lower_bound": lower}  # fmt: skip


def ratio_lower_bound(ours: Capacity, baseline: Capacity, iv: Interval) -> dict[str, Any] | None:
    """Where censoring leaves `capacity_ratio` no interval, a one-sided one may remain.
    A repeat whose crossing is censored "above" has its true capacity at or past the
    grid's top (its value a lower bound), and one censored "below" has it under the
    grid's bottom (its value an upper bound). So where ours is exact or censored above
    in every repeat, and the baseline exact or censored below, each per-repeat ratio
    is at most the true one, and the low end of their 95% t interval is a conservative
    lower end for the true mean ratio (one-sided 97.5%). `iv`: the per-repeat ratios'
    interval. None where the censoring does not allow it (ours below, the baseline
    above), or nothing is censored."""
    if not (ours.censored or baseline.censored):
        return None
    if "below" in ours.per_repeat_censored or "above" in baseline.per_repeat_censored:
        return None
    if not ours.per_repeat_censored or not baseline.per_repeat_censored:
        return None  # a Capacity made without per-repeat censoring: nothing to go on
    low = iv.low if math.isfinite(iv.low) else None
    return {"mean": iv.mean, "low": low, "n": iv.n}


def engine_capacity(cells: Sequence[Mapping[str, Any]], engine: str) -> Capacity:
    """`capacity` of one engine over a result's cells (its rates ascending)."""
    mine = sorted((c for c in cells if c["engine"] == engine), key=lambda c: float(c["rate"]))
    if not mine:
        raise ValueError(f"no cells for engine {engine!r}")
    return capacity([float(c["rate"]) for c in mine], [list(c["attainment"]) for c in mine])
