"""The engine-throughput comparison under the protocol (docs/benchmarking.md,
"Engine throughput under the protocol"): the committed config `bench_vs_vllm.py
--config` reads, and the statistics it writes beside the raw replies.

Each repeat runs every engine once on every workload, engines alternating in a
rotating order; a repeat's ratio pairs augserve's figure with the baseline's from the
same repeat (their time / ours for the ms/token workload), and every figure and ratio
is reported as a mean with its 95% t interval over the repeats, with the 1-minute load
average at each repeat's start. No torch, no vLLM: imported from the driver only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import WORKLOADS

from augserve.bench.capacity import mean_interval
from augserve.bench.protocol import MIN_REPEATS

ENGINES = ("augserve", "vllm-eager", "vllm-compiled", "hf")
OURS = "augserve"


@dataclass(frozen=True)
class EngineConfig:
    """Everything fixed before an engine comparison runs (see the module doc)."""

    name: str
    engines: tuple[str, ...]
    workloads: tuple[str, ...]
    hf_workloads: tuple[str, ...]
    repeats: int
    threads: int
    kv_gib: int
    block_size: int
    max_batch_tokens: int
    augserve_compile: bool | None
    model: str

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("name must be non-empty")
        if OURS not in self.engines or not set(self.engines) <= set(ENGINES):
            raise ValueError(f"engines must include {OURS!r}, from {ENGINES}, got {self.engines}")
        if len(self.engines) < 2:
            raise ValueError("engines must name augserve and at least one baseline")
        for field_name in ("workloads", "hf_workloads"):
            bad = set(getattr(self, field_name)) - set(WORKLOADS)
            if bad:
                raise ValueError(f"{field_name}: unknown workload(s) {sorted(bad)}")
        if self.repeats < MIN_REPEATS:
            raise ValueError(f"repeats must be >= {MIN_REPEATS} (the protocol), got {self.repeats}")
        for field_name in ("threads", "kv_gib", "block_size", "max_batch_tokens"):
            if getattr(self, field_name) < 1:
                raise ValueError(f"{field_name} must be >= 1, got {getattr(self, field_name)}")
        if not self.model:
            raise ValueError("model must name a directory or a make-model preset")


def load_engine_config(path: str | Path) -> tuple[EngineConfig, str]:
    """The config and the sha256 of its bytes (recorded with the result)."""
    raw = Path(path).read_bytes()
    d = json.loads(raw)
    s = d["settings"]
    cfg = EngineConfig(
        name=d["name"],
        engines=tuple(s["engines"]),
        workloads=tuple(s["workloads"]),
        hf_workloads=tuple(s["hf_workloads"]),
        repeats=int(s["repeats"]),
        threads=int(s["threads"]),
        kv_gib=int(s["kv_gib"]),
        block_size=int(s["block_size"]),
        max_batch_tokens=int(s["max_batch_tokens"]),
        augserve_compile=s["augserve_compile"],
        model=s["model"],
    )
    return cfg, hashlib.sha256(raw).hexdigest()


def ratio(ours: float, theirs: float, kind: str) -> float:
    """augserve over the baseline, > 1 when augserve is faster (ms/token: theirs / ours)."""
    return theirs / ours if kind == "decode1" else ours / theirs


def summarize(
    res: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]], kinds: Mapping[str, str]
) -> dict[str, Any]:
    """Per workload: each engine's per-repeat values with their mean and interval, and
    augserve's paired per-repeat ratio over each baseline with its mean and interval."""
    out: dict[str, Any] = {}
    for wl, per in res.items():
        values = {e: [float(r["value"]) for r in rs] for e, rs in per.items() if rs}
        engines = {e: {"values": v, **mean_interval(v).to_dict()} for e, v in values.items()}
        ratios = {}
        for e, theirs in values.items():
            if e == OURS or OURS not in values:
                continue
            pairs = [ratio(o, t, kinds[wl]) for o, t in zip(values[OURS], theirs, strict=True)]
            ratios[e] = {"per_repeat": pairs, **mean_interval(pairs).to_dict()}
        out[wl] = {"engines": engines, "ratio_over": ratios}
    return out
