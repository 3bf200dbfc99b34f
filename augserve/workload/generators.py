"""Synthetic and resampled workloads, all seeded and reproducible.

- `infercept_like`: six augmentation types with per-kind distributions fitted
  from INFERCEPT's real trace (`infercept_fit.INFERCEPT_PROFILES`).
- `toolbench_like`: ToolBench-style API agents (`TOOLBENCH_PROFILE`).
- `resample`: draw requests of a real trace uniformly with replacement
  (what INFERCEPT does).
- `mix_no_call`: disable the calls of a fraction of requests while keeping
  their prompts and output lengths (paper appendix D.1).

`augserve.workload.registry.make_workload` maps names to these.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from augserve.core.request import Segment
from augserve.workload.infercept_fit import INFERCEPT_PROFILES
from augserve.workload.profiles import KindProfile, LogNormal
from augserve.workload.trace import Trace, TraceRequest

# ToolBench (Qin et al., 2024) as the AugServe paper uses it: about 3.7 API
# calls per query, API latencies of seconds (predictor MSE ~5 s), results of
# hundreds of tokens, long prompts holding the tool documentation. The paper
# gives no table; these are our assumptions (DECISION), documented in
# docs/trace-format.md.
TOOLBENCH_PROFILE = KindProfile(
    kind="toolbench",
    weight=1.0,
    # 1..8 calls, mean 3.7
    calls_pmf=(0.0, 0.10, 0.15, 0.20, 0.25, 0.15, 0.10, 0.05),
    prompt_len=LogNormal(float(np.log(1200.0)), 0.35, 300.0, 4000.0),
    output_len=LogNormal(float(np.log(60.0)), 0.6, 5.0, 600.0),
    call_time=LogNormal(float(np.log(1.5)), 1.0, 0.05, 60.0),
    return_len=LogNormal(float(np.log(200.0)), 0.8, 10.0, 2048.0),
    tool="api",
)


def _seg_request(profile: KindProfile, rng: np.random.Generator, request_id: str) -> TraceRequest:
    n_calls = int(rng.choice(len(profile.calls_pmf), p=np.asarray(profile.calls_pmf)))
    outputs = [max(1, x) for x in profile.output_len.sample_int(rng, n_calls + 1)]
    returns = profile.return_len.sample_int(rng, n_calls)
    if profile.same_call_time:
        times = [float(profile.call_time.sample(rng))] * n_calls
    else:
        times = [float(x) for x in profile.call_time.sample(rng, n_calls)]
    segments = [Segment(outputs[i], times[i], returns[i], profile.tool) for i in range(n_calls)]
    segments.append(Segment(outputs[-1]))
    prompt_len = max(1, int(round(float(profile.prompt_len.sample(rng)))))
    return TraceRequest(request_id, prompt_len, tuple(segments), None, profile.kind)


def from_profiles(profiles: Mapping[str, KindProfile], n: int, seed: int, name: str) -> Trace:
    """`n` requests, each of a kind drawn by weight, then from its profile."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    kinds = sorted(profiles)
    weights = np.asarray([profiles[k].weight for k in kinds], dtype=float)
    if weights.sum() <= 0:
        raise ValueError("profiles: weights sum to 0")
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(kinds), size=n, p=weights / weights.sum())
    requests = [_seg_request(profiles[kinds[k]], rng, f"{name}-{i}") for i, k in enumerate(picks)]
    return Trace(name=name, requests=tuple(requests))


def infercept_like(n: int, seed: int = 0, kinds: tuple[str, ...] | None = None) -> Trace:
    """INFERCEPT-like requests (optionally only some kinds, re-weighted)."""
    profiles = INFERCEPT_PROFILES
    if kinds is not None:
        unknown = set(kinds) - set(profiles)
        if unknown:
            raise ValueError(f"kinds: unknown kind(s) {sorted(unknown)}; known {sorted(profiles)}")
        profiles = {k: profiles[k] for k in kinds}
    return from_profiles(profiles, n, seed, "infercept-like")


def toolbench_like(n: int, seed: int = 0) -> Trace:
    """ToolBench-like requests (see `TOOLBENCH_PROFILE`)."""
    return from_profiles({"toolbench": TOOLBENCH_PROFILE}, n, seed, "toolbench-like")


def resample(trace: Trace, n: int, seed: int = 0) -> Trace:
    """`n` requests drawn uniformly with replacement; ids get a `-{i}` suffix."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if len(trace) == 0:
        raise ValueError(f"trace {trace.name!r} is empty")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(trace), size=n)
    requests = [
        _renamed(trace[int(k)], f"{trace[int(k)].request_id}-{i}") for i, k in enumerate(picks)
    ]
    return Trace(name=f"{trace.name}-resampled", requests=tuple(requests))


def without_calls(tr: TraceRequest) -> TraceRequest:
    """The same prompt and total output, generated in one go without a call."""
    return TraceRequest(
        tr.request_id, tr.prompt_len, (Segment(tr.output_len),), tr.prompt_text, tr.kind
    )


def mix_no_call(trace: Trace, fraction: float, seed: int = 0) -> Trace:
    """Disable the calls of `round(fraction * n)` requests, chosen at random."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    rng = np.random.default_rng(seed)
    k = int(round(fraction * len(trace)))
    chosen = set(int(i) for i in rng.choice(len(trace), size=k, replace=False))
    requests = [without_calls(tr) if i in chosen else tr for i, tr in enumerate(trace)]
    return Trace(name=f"{trace.name}-mixed{fraction:g}", requests=tuple(requests))


def _renamed(tr: TraceRequest, request_id: str) -> TraceRequest:
    return TraceRequest(request_id, tr.prompt_len, tr.segments, tr.prompt_text, tr.kind)
