"""The comparison protocol (docs/benchmarking.md), written once for every benchmark
against another system: the committed config a run reads, the result file it writes,
and the statistics it reports.

- `ComparisonConfig`: everything fixed before a run (workload, time scale, rates,
  durations, seeds, memory, SLO), read from a committed JSON file under
  benchmarks/configs/ that a calibration run wrote (`load_config`).
- `result_file` / `check_result`: the result file's schema (`command`, `commit`,
  `date`, `load`, `memory`, `slo`, `repeats`, `time_scale`, and per cell the
  per-repeat values).
- the statistics (`mean_interval`, `crossing`, `capacity`, `capacity_ratio`):
  `augserve/bench/capacity.py`.

No server, no torch: pure functions over numbers and dicts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from augserve.bench.capacity import mean_interval

MIN_REPEATS = 3
RESULT_FIELDS = ("command", "commit", "date", "load", "memory", "slo", "repeats",
                 "time_scale", "cells")  # fmt: skip
CELL_FIELDS = ("rate", "engine", "seeds", "attainment", "goodput", "load")


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
    # a run in parts (one per session): which repeats each part runs, fixed in advance
    split: tuple[tuple[int, ...], ...] | None = None

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
        if self.split is not None:
            flat = sorted(r for part in self.split for r in part)
            if flat != list(range(len(self.seeds))) or not all(self.split):
                raise ValueError(
                    f"split: non-empty parts that run each repeat 0..{len(self.seeds) - 1} "
                    f"once, got {[list(p) for p in self.split]}"
                )

    def workload_seed(self, repeat: int, rate_index: int) -> int:
        """The seed of the workload at rate `rate_index` in `repeat`: every system runs
        the same one (paired repeats), each cell a different one."""
        return 1000 * self.seeds[repeat] + rate_index

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ComparisonConfig:
        known = {"name", "workload", "time_scale", "length_scale", "rates", "duration_s",
                 "drain_s", "seeds", "memory", "slo", "settings", "calibration",
                 "split"}  # fmt: skip
        missing = sorted(known - {"settings", "calibration", "split"} - set(d))
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
            split=None if d.get("split") is None
            else tuple(tuple(int(r) for r in part) for part in d["split"]),
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
