"""Per-kind workload distributions, and fitting them from a trace.

A `KindProfile` describes one augmentation type: how many calls a request
makes (an empirical pmf), and log-normal distributions (clipped to the
observed range) of prompt length, tokens generated per segment, call time
and returned tokens. `fit_profiles(trace)` fits one profile per `kind`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from augserve.workload.trace import Trace, TraceRequest


@dataclass(frozen=True)
class LogNormal:
    """exp(N(mu, sigma^2)) clipped to [lo, hi]."""

    mu: float
    sigma: float
    lo: float
    hi: float

    def __post_init__(self) -> None:
        if self.sigma < 0:
            raise ValueError(f"LogNormal.sigma must be >= 0, got {self.sigma}")
        if not 0 <= self.lo <= self.hi:
            raise ValueError(f"LogNormal.lo must be in [0, hi], got lo={self.lo} hi={self.hi}")

    @property
    def median(self) -> float:
        return min(max(math.exp(self.mu), self.lo), self.hi)

    def sample(self, rng: np.random.Generator, size: int | None = None) -> np.ndarray:
        return np.clip(rng.lognormal(self.mu, self.sigma, size=size), self.lo, self.hi)

    def sample_int(self, rng: np.random.Generator, size: int) -> list[int]:
        return [int(round(x)) for x in self.sample(rng, size)]

    @classmethod
    def fit(cls, values: Sequence[float], floor: float = 1e-9) -> LogNormal:
        """Fit mu and sigma to the logs of the values (each raised to `floor`)."""
        if not values:
            raise ValueError("LogNormal.fit: values is empty")
        logs = np.log(np.maximum(np.asarray(values, dtype=float), floor))
        return cls(float(logs.mean()), float(logs.std()), float(min(values)), float(max(values)))


@dataclass(frozen=True)
class KindProfile:
    """Distributions of one augmentation type. `calls_pmf[k]` = P(k calls)."""

    kind: str
    weight: float  # share of requests of this kind in a mix
    calls_pmf: tuple[float, ...]
    prompt_len: LogNormal
    output_len: LogNormal  # tokens generated per segment
    call_time: LogNormal  # seconds
    return_len: LogNormal  # tokens returned per call
    same_call_time: bool = False  # one duration for all calls of a request (ALFWorld)
    tool: str | None = None

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise ValueError(f"KindProfile.weight must be >= 0, got {self.weight}")
        if not self.calls_pmf or any(p < 0 for p in self.calls_pmf):
            raise ValueError("KindProfile.calls_pmf must be non-empty and non-negative")
        if abs(sum(self.calls_pmf) - 1.0) > 1e-6:
            raise ValueError(f"KindProfile.calls_pmf must sum to 1, got {sum(self.calls_pmf)}")

    @property
    def mean_calls(self) -> float:
        return sum(k * p for k, p in enumerate(self.calls_pmf))


def fit_profile(kind: str, requests: Sequence[TraceRequest], total: int) -> KindProfile:
    """Fit one kind's profile from its requests (`total` = requests in the whole mix)."""
    counts = Counter(r.num_calls for r in requests)
    pmf = tuple(counts.get(k, 0) / len(requests) for k in range(max(counts) + 1))
    calls = [s for r in requests for s in r.segments if s.call_time is not None]
    positive = [s.call_time for s in calls if s.call_time is not None and s.call_time > 0]
    same = (
        all(len({s.call_time for s in r.segments if s.has_call}) <= 1 for r in requests)
        and max(counts) > 1
    )
    return KindProfile(
        kind=kind,
        weight=len(requests) / total,
        calls_pmf=pmf,
        prompt_len=LogNormal.fit([r.prompt_len for r in requests], floor=1),
        output_len=LogNormal.fit([s.output_len for r in requests for s in r.segments], floor=1),
        call_time=LogNormal.fit(positive or [0.0]),
        return_len=LogNormal.fit([s.return_len for s in calls] or [0], floor=1),
        same_call_time=same,
        tool=kind,
    )


def fit_profiles(trace: Trace) -> dict[str, KindProfile]:
    """One profile per kind (requests without a kind are left out)."""
    by_kind: dict[str, list[TraceRequest]] = {}
    for r in trace:
        if r.kind is not None:
            by_kind.setdefault(r.kind, []).append(r)
    total = sum(len(v) for v in by_kind.values())
    return {k: fit_profile(k, v, total) for k, v in sorted(by_kind.items())}
