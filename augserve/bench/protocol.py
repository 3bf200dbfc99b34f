"""The comparison protocol (docs/benchmarking.md), written once for every benchmark
against another system: the committed config a run reads, the result file it writes,
and the statistics it reports.

- `ComparisonConfig`: everything fixed before a run (workload, time scale, rates,
  durations, seeds, memory, SLO), read from a committed JSON file under
  benchmarks/configs/ that a calibration run wrote (`load_config`).
- `result_file` / `check_result`: the result file's schema (`command`, `commit`,
  `date`, `load`, `memory`, `slo`, `repeats`, `time_scale`, and per cell the
  per-repeat values).
- `mean_interval`: a mean and its two-sided 95% Student-t interval.
- `crossing` / `capacity`: SLO capacity, the rate where the linearly interpolated
  attainment curve first falls through 90%, and its interval from the per-repeat
  crossings (`capacity_ratio`: the paired per-repeat ratio of two systems').

No server, no torch: pure functions over numbers and dicts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FLOOR = 0.9  # the attainment that defines SLO capacity
MIN_REPEATS = 3
# two-sided 95% Student-t critical values t_{0.975, df}, df = 1..30
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip
RESULT_FIELDS = ("command", "commit", "date", "load", "memory", "slo", "repeats",
                 "time_scale", "cells")  # fmt: skip
CELL_FIELDS = ("rate", "engine", "seeds", "attainment", "goodput", "load")


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

    def to_dict(self) -> dict[str, Any]:
        iv = self.interval.to_dict()
        return {"rate": self.rate, "censored": self.censored, "interval": iv,
                "per_repeat": list(self.per_repeat)}  # fmt: skip


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
    return Capacity(mean_cross.rate, iv, values, censored)


def capacity_ratio(ours: Capacity, baseline: Capacity) -> dict[str, Any]:
    """Our capacity over the baseline's: the mean curves' ratio and the t interval of
    the paired per-repeat ratios (repeat r of both ran the same seeded workloads)."""
    if len(ours.per_repeat) != len(baseline.per_repeat):
        raise ValueError("capacity_ratio: both systems need the same repeats")
    ratios = [a / b for a, b in zip(ours.per_repeat, baseline.per_repeat, strict=True)]
    iv = mean_interval(ratios)
    if ours.censored or baseline.censored:
        iv = Interval(iv.mean, math.nan, math.nan, iv.n)
    return {"ratio": ours.rate / baseline.rate, "censored": bool(ours.censored or
            baseline.censored), "per_repeat": ratios, "interval": iv.to_dict()}  # fmt: skip


@dataclass(frozen=True)
class Memory:
    """KV tokens per system: augserve's device and host pools, the baseline's whole
    pool (device, plus any host offload it runs). Equal memory: the two totals match."""

    augserve_device_tokens: int
    augserve_host_tokens: int
    baseline_tokens: int

    def __post_init__(self) -> None:
        for name, v in asdict(self).items():
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"memory.{name} must be a non-negative integer, got {v!r}")
        if self.augserve_device_tokens + self.augserve_host_tokens != self.baseline_tokens:
            raise ValueError(
                "memory.baseline_tokens must equal augserve_device_tokens + augserve_host_tokens "
                f"(equal memory), got {self.baseline_tokens} vs "
                f"{self.augserve_device_tokens} + {self.augserve_host_tokens}"
            )


@dataclass(frozen=True)
class SLO:
    """Absolute SLO: TTFT and normalized latency bounds; `source` names the committed
    config (and the calibration) it came from."""

    ttft_s: float
    norm_latency_s: float
    source: str

    def __post_init__(self) -> None:
        for name in ("ttft_s", "norm_latency_s"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"slo.{name} must be a positive number, got {v!r}")
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError("slo.source must name the committed config it came from")


@dataclass(frozen=True)
class ComparisonConfig:
    """Everything a comparison fixes before it runs."""

    name: str
    workload: str
    time_scale: float
    length_scale: float
    rates: tuple[float, ...]
    duration_s: float
    drain_s: float
    seeds: tuple[int, ...]
    memory: Memory
    slo: SLO
    settings: Mapping[str, Any] = field(default_factory=dict)  # engine flags: block size, ...
    calibration: Mapping[str, Any] = field(default_factory=dict)  # how the SLO was fixed

    def __post_init__(self) -> None:
        if not 0 < self.time_scale <= 1:
            raise ValueError(f"time_scale must be in (0, 1], got {self.time_scale}")
        if not 0 < self.length_scale <= 1:
            raise ValueError(f"length_scale must be in (0, 1], got {self.length_scale}")
        if not self.rates or any(b <= a for a, b in zip(self.rates, self.rates[1:], strict=False)):
            raise ValueError(f"rates must be non-empty and strictly ascending: {self.rates}")
        if self.rates[0] <= 0:
            raise ValueError(f"rates must be positive: {self.rates}")
        if self.duration_s <= 0 or self.drain_s < 0:
            raise ValueError(f"duration_s must be > 0 and drain_s >= 0: "
                             f"{self.duration_s}, {self.drain_s}")  # fmt: skip
        if len(self.seeds) < MIN_REPEATS or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds: at least {MIN_REPEATS} distinct, got {list(self.seeds)}")

    def workload_seed(self, repeat: int, rate_index: int) -> int:
        """The seed of the workload at rate `rate_index` in `repeat`: every system runs
        the same one (paired repeats), each cell a different one."""
        return 1000 * self.seeds[repeat] + rate_index

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ComparisonConfig:
        known = {"name", "workload", "time_scale", "length_scale", "rates", "duration_s",
                 "drain_s", "seeds", "memory", "slo", "settings", "calibration"}  # fmt: skip
        missing = sorted(known - {"settings", "calibration"} - set(d))
        if missing:
            raise ValueError(f"config: missing field(s) {', '.join(missing)}")
        extra = sorted(set(d) - known - {"comment"})
        if extra:
            raise ValueError(f"config: unknown field(s) {', '.join(extra)}")
        if not isinstance(d["slo"], Mapping):
            raise ValueError("config: slo is not set (run the benchmark's calibration first)")
        return cls(
            name=str(d["name"]), workload=str(d["workload"]),
            time_scale=float(d["time_scale"]), length_scale=float(d["length_scale"]),
            rates=tuple(float(r) for r in d["rates"]), duration_s=float(d["duration_s"]),
            drain_s=float(d["drain_s"]), seeds=tuple(int(s) for s in d["seeds"]),
            memory=Memory(**d["memory"]), slo=SLO(**d["slo"]),
            settings=dict(d.get("settings", {})), calibration=dict(d.get("calibration", {})),
        )  # fmt: skip


def load_config(path: str | Path) -> ComparisonConfig:
    """A committed config file (benchmarks/configs/*.json)."""
    return ComparisonConfig.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def summarize_cell(cell: Mapping[str, Any]) -> dict[str, Any]:
    """A cell's per-repeat values with their mean and 95% interval added."""
    out = dict(cell)
    for key in ("attainment", "goodput"):
        out[f"{key}_interval"] = mean_interval([float(v) for v in cell[key]]).to_dict()
    return out


def result_file(
    *, command: str, commit: str, date: str, load: Sequence[float], memory: Memory, slo: SLO,
    repeats: int, time_scale: float, cells: Sequence[Mapping[str, Any]], **extra: Any,
) -> dict[str, Any]:  # fmt: skip
    """The result file's payload: the protocol's fields, each cell summarized; `extra`
    (capacities, the config's name, engine timings) goes beside them."""
    payload: dict[str, Any] = {
        "command": command, "commit": commit, "date": date, "load": list(load),
        "memory": asdict(memory), "slo": asdict(slo), "repeats": repeats,
        "time_scale": time_scale, "cells": [summarize_cell(c) for c in cells], **extra,
    }  # fmt: skip
    check_result(payload)
    return payload


def check_result(payload: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first field of a result file that breaks the schema."""
    for key in RESULT_FIELDS:
        if key not in payload:
            raise ValueError(f"result: missing field {key!r}")
    Memory(**payload["memory"])
    SLO(**payload["slo"])
    repeats = payload["repeats"]
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"result: repeats must be a positive integer, got {repeats!r}")
    for i, cell in enumerate(payload["cells"]):
        for key in CELL_FIELDS:
            if key not in cell:
                raise ValueError(f"result: cells[{i}] missing field {key!r}")
        for key in ("seeds", "attainment", "goodput", "load"):
            if len(cell[key]) != repeats:
                raise ValueError(f"result: cells[{i}].{key} has {len(cell[key])} values, "
                                 f"expected one per repeat ({repeats})")  # fmt: skip


def engine_capacity(cells: Sequence[Mapping[str, Any]], engine: str) -> Capacity:
    """`capacity` of one engine over a result's cells (its rates ascending)."""
    mine = sorted((c for c in cells if c["engine"] == engine), key=lambda c: float(c["rate"]))
    if not mine:
        raise ValueError(f"no cells for engine {engine!r}")
    return capacity([float(c["rate"]) for c in mine], [list(c["attainment"]) for c in mine])
