"""Benchmark points and the pluggable backends that run them.

A `BenchPoint` is one (policy, rate, seed) setting with everything needed to
run it on its own, in any process. A backend is a function
`run_point(point) -> list[row]` (a row is a flat dict of metrics) registered
by name as a dotted path `"module:function"`, imported lazily in the worker
(so a worker process can run a backend that was never imported by the
parent). `sim` is the discrete-event simulator; `engine` is the real engine
(added by the engine's own module). `augserve.bench.pool.run_points` runs many
points in worker processes.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

Row = dict[str, Any]
RunPoint = Callable[["BenchPoint"], list[Row]]

BACKENDS: dict[str, str] = {
    "sim": "augserve.bench.runner:run_sim_point",
    "engine": "augserve.bench.engine_backend:run_point",
}


def register_backend(name: str, target: str) -> None:
    """Make `--backend NAME` run `target` ("module:function", a `RunPoint`)."""
    if ":" not in target:
        raise ValueError(f"backend {name!r}: target must be 'module:function', got {target!r}")
    BACKENDS[name] = target


def get_backend(name: str) -> RunPoint:
    """The backend registered as `name`, or `name` itself when it is "module:function"
    (so a point can name a backend that no process registered, e.g. in a Ray worker)."""
    target = BACKENDS.get(name) or (name if ":" in name else None)
    if target is None:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    module, _, func = target.partition(":")
    try:
        fn: RunPoint = getattr(importlib.import_module(module), func)
    except (ModuleNotFoundError, AttributeError) as exc:
        raise ValueError(f"backend {name!r} is not available ({target}): {exc}") from None
    return fn


@dataclass(frozen=True)
class BenchPoint:
    """One run: a policy at an arrival rate with one seed, on one workload and setup.

    Workload: `trace` (a trace file, resampled uniformly with replacement to
    the arrival stream) or `workload` (a `make_workload` name). Arrivals:
    `poisson` or `gamma:CV` at `rate` req/s over `window` seconds; serving goes
    on for `drain` seconds after arrivals stop.
    """

    policy: str
    rate: float
    seed: int = 0
    backend: str = "sim"
    trace: str | None = None
    workload: str | None = None
    arrival: str = "poisson"
    profile: str = "opt-13b-h800"
    window: float = 600.0
    drain: float = 0.0
    predictor: str = "oracle"
    beta: float | None = None
    max_batch_tokens: int | None = None
    block_size: int = 16
    overrides: tuple[tuple[str, str], ...] = ()  # further SchedulerConfig fields (--set)

    def __post_init__(self) -> None:
        if (self.trace is None) == (self.workload is None):
            raise ValueError("BenchPoint: give exactly one of trace and workload")
        if not self.rate > 0:
            raise ValueError(f"BenchPoint.rate must be > 0, got {self.rate}")
        if not self.window > 0:
            raise ValueError(f"BenchPoint.window must be > 0, got {self.window}")
        if self.drain < 0:
            raise ValueError(f"BenchPoint.drain must be >= 0, got {self.drain}")
        arrival_cv(self.arrival)
        parse_overrides(self.overrides)

    def key(self) -> dict[str, Any]:
        """The point's settings, as the leading columns of its rows."""
        return asdict(self)


def arrival_cv(spec: str) -> float:
    """`poisson` -> 1.0; `gamma:CV` -> CV."""
    if spec == "poisson":
        return 1.0
    kind, _, arg = spec.partition(":")
    if kind == "gamma":
        try:
            cv = float(arg)
        except ValueError:
            cv = -1.0
        if cv > 0:
            return cv
    raise ValueError(f"arrival: want 'poisson' or 'gamma:CV' with CV > 0, got {spec!r}")


def parse_overrides(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """`(("beta_high", "1.0"), ("dynamic_budget", "false"))` -> typed SchedulerConfig fields."""
    from dataclasses import fields

    from augserve.core.config import SchedulerConfig
    from augserve.core.request import ContextPolicy

    known = {f.name: f for f in fields(SchedulerConfig)}
    out: dict[str, Any] = {}
    for key, text in pairs:
        if key not in known or key in ("policy", "predictor"):
            raise ValueError(f"--set: unknown scheduler option {key!r}")
        kind = str(known[key].type)  # e.g. "bool | None": the type, whatever the default
        low = text.strip().lower()
        try:
            if low in ("none", "null"):
                out[key] = None
            elif key == "forced_context_policy":
                out[key] = ContextPolicy(low)
            elif kind.startswith("bool"):
                if low not in ("true", "false", "1", "0"):
                    raise ValueError(text)
                out[key] = low in ("true", "1")
            elif kind.startswith("int"):
                out[key] = int(text)
            else:
                out[key] = float(text)
        except ValueError:
            raise ValueError(f"--set: bad value {text!r} for {key}") from None
    return out


# --- the simulator backend ----------------------------------------------------------
@lru_cache(maxsize=8)
def _load_trace_cached(path: str) -> Any:
    from augserve.workload import load_trace

    return load_trace(path)


def build_requests(point: BenchPoint) -> list[Any]:
    """The arrival stream: arrival times in [0, window), a request drawn for each."""
    from augserve.workload import ArrivalConfig, arrival_times_until, make_workload, resample

    cfg = ArrivalConfig(point.rate, arrival_cv(point.arrival))
    times = arrival_times_until(cfg, point.window, seed=point.seed)
    if point.trace is not None:
        trace = resample(_load_trace_cached(point.trace), len(times), seed=point.seed)
    else:
        assert point.workload is not None
        trace = make_workload(point.workload, len(times), seed=point.seed)
    if len(trace) < len(times):
        raise ValueError(
            f"workload {point.workload!r} has {len(trace)} requests, "
            f"the arrival stream needs {len(times)}"
        )
    return trace.to_requests(times)


def point_scheduler_config(point: BenchPoint, profile: Any) -> Any:
    """The point's `SchedulerConfig`: capacities from the profile, then the point's
    beta / max_batch_tokens / block size / predictor and `--set` overrides.
    Every backend should build its scheduler config with this."""
    from augserve.core.config import scheduler_config_for

    return scheduler_config_for(
        profile,
        point.policy,
        block_size=point.block_size,
        beta=point.beta,
        max_batch_tokens=point.max_batch_tokens,
        predictor=point.predictor,
        **parse_overrides(point.overrides),
    )


# columns that measure this machine's wall time: they differ between two runs of a point
WALL_TIME_COLUMNS = ("sim_wall_s", "sim_cpu_s", "sched_ms_per_iter", "sched_cpu_ms_per_iter")


class Probe(Protocol):
    """Watches one simulation: `attach` gets the `Simulator` before it runs, `observe`
    every iteration (the simulator's observer), `summary` adds columns to the row."""

    def attach(self, sim: Any) -> None: ...

    def observe(self, end: float, out: Any, upd: Any) -> None: ...

    def summary(self) -> Row: ...


def run_sim_point(point: BenchPoint) -> list[Row]:
    """Simulate one point and summarize it as one row."""
    return [sim_point_row(point)]


def sim_point_row(point: BenchPoint, probe: Probe | None = None) -> Row:
    """Simulate one point (watched by `probe`, if any) and summarize it as one row."""
    from augserve.core.metrics import SLOConfig, compute_metrics
    from augserve.predict.base import make_predictor
    from augserve.profiles import load_profile
    from augserve.sim.simulator import Simulator

    profile = load_profile(point.profile)
    config = point_scheduler_config(point, profile)
    requests = build_requests(point)
    predictor = make_predictor(point.predictor, seed=point.seed)
    observer = probe.observe if probe is not None else None
    sim = Simulator(profile, config, predictor, observer=observer)
    if probe is not None:
        probe.attach(sim)
    t0, c0 = time.perf_counter(), time.process_time()
    result = sim.run(requests, point.window, point.drain)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    slo = SLOConfig.from_iteration_time(profile.decode_iter_time())
    summary = compute_metrics(result.requests, slo, start=0.0, end=point.window + point.drain)
    row: Row = point.key()
    row["overrides"] = ",".join(f"{k}={v}" for k, v in point.overrides)
    row.update(summary.to_dict())
    per_window = (point.window + point.drain) / point.window  # rates per second of window
    for name in ("goodput", "throughput_rps", "throughput_tps"):
        row[name] *= per_window
    stats = result.stats
    row.update(
        num_offered=len(result.requests) - len(result.not_arrived),
        sim_finished=len(result.finished),
        sim_unfinished=len(result.unfinished),
        iterations=stats.iterations,
        busy_share=stats.busy_time / max(stats.end_time, 1e-12),
        swap_stall_s=stats.swap_stall_time,
        swapped_blocks=stats.swapped_blocks,
        discards=stats.discards,
        calls=stats.calls,
        stalled=stats.stalled,
        sched_ms_per_iter=stats.sched_ms_per_iter,  # wall
        sched_cpu_ms_per_iter=stats.sched_cpu_ms_per_iter,
        prefix_hit_rate=stats.prefix_hit_rate,
        sim_wall_s=wall,
        sim_cpu_s=cpu,
        sim_end_time=stats.end_time,
    )
    if probe is not None:
        row.update(probe.summary())
    return row


def expand_points(
    base: BenchPoint, policies: Sequence[str], rates: Sequence[float], seeds: Sequence[int]
) -> list[BenchPoint]:
    """The grid policies x rates x seeds (policy outermost)."""
    return [replace(base, policy=p, rate=r, seed=s) for p in policies for r in rates for s in seeds]


def default_trace_path() -> Path:
    """The INFERCEPT trace `merged_exp_uniform.json`: the copy shipped in the package
    (or under `$AUGSERVE_DATA_DIR/infercept/` when that is set)."""
    from augserve.workload.registry import INFERCEPT_FILE, default_data_dir

    return default_data_dir() / "infercept" / INFERCEPT_FILE
