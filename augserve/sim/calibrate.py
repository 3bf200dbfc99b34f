"""Fit calibrated profiles to the paper's own absolute figures (docs/profiles.md).

    python -m augserve.sim.calibrate              # fit each calibration, print the loss curve
    python -m augserve.sim.calibrate --write      # ... record the scales (derive.py) + JSON
    python -m augserve.sim.calibrate --check      # exit 1 if a fit moved off its record

A calibrated profile is a roofline profile with every time term multiplied by
one factor s (`derive.scaled_profile`: a uniformly slower machine). For each
candidate s the simulator runs the paper's experiments behind the target
figures (same trace, arrival process, window and scheduler defaults as the main
comparison) and the loss is the sum over targets of
log((sim + eps) / (paper + eps))^2 (eps: 0.01 req/s for goodput, 1 s for TTFT).
The search is a coarse grid, then a finer one around the best coarse point;
both are fixed, so the fit is deterministic. The fitted s is rounded to the
fine step and recorded in `augserve/profiles/derive.py` (`CALIBRATED`), from
which `python -m augserve.profiles.derive` writes the JSON.
"""

from __future__ import annotations

import argparse
import importlib
import math
import re
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from augserve.core.config import scheduler_config_for
from augserve.core.latency import LatencyProfile
from augserve.core.metrics import SLOConfig, compute_metrics
from augserve.predict.base import make_predictor
from augserve.profiles import derive
from augserve.sim.simulator import simulate

WINDOW = 1800.0  # the paper's 30-minute runs


@dataclass(frozen=True)
class Target:
    """One absolute figure of the paper and the run that reproduces it (Poisson
    arrivals: a Gamma process with CV 1, Table 7's first rows, is the same process)."""

    source: str  # where the paper gives it
    policy: str
    rate: float
    metric: str  # "goodput" (req/s) or "ttft_mean" (s)
    value: float
    max_batch_tokens: int | None = None  # Table 1 sweeps the static budget

    @property
    def run(self) -> tuple[str, float, int | None]:
        """Targets with the same run share one simulation."""
        return (self.policy, self.rate, self.max_batch_tokens)

    @property
    def eps(self) -> float:
        return 1.0 if self.metric == "ttft_mean" else 0.01


@dataclass(frozen=True)
class Calibration:
    name: str  # the calibrated profile
    base: str  # the roofline profile it scales
    targets: tuple[Target, ...]
    coarse: tuple[float, ...] = tuple(1.0 + 0.25 * i for i in range(13))  # 1.0 .. 4.0
    fine_step: float = 0.05
    fine_span: int = 4  # fine points each side of the best coarse one


def _table1(rate: float, budgets: Sequence[int], goodput: Sequence[float]) -> tuple[Target, ...]:
    return tuple(
        Target(f"Table 1, T_max {b}", "infercept", rate, "goodput", g, max_batch_tokens=b)
        for b, g in zip(budgets, goodput, strict=True)
    )


BUDGETS = (100, 500, 1000, 1500, 2000)
CALIBRATIONS: tuple[Calibration, ...] = (
    Calibration(
        "opt-13b-h800-paper",
        "opt-13b-h800",
        (
            Target("Table 2, Base (INFERCEPT)", "infercept", 3.0, "goodput", 0.15),
            Target("Table 2, Base (INFERCEPT)", "infercept", 3.0, "ttft_mean", 306.26),
            Target("Table 7, CV 1, vLLM", "vllm", 3.0, "goodput", 0.14),
            Target("Table 7, CV 1, INFERCEPT", "infercept", 3.0, "goodput", 0.20),
        ),
    ),
    Calibration(
        "gptj-6b-rtx4090-paper",
        "gptj-6b-rtx4090",
        _table1(2.0, BUDGETS, (0.29, 0.41, 0.25, 0.11, 0.10)),
    ),
)
# Held out (not fitted): Table 1's OPT-13B row checks the OPT calibration.
CHECKS: dict[str, tuple[Target, ...]] = {
    "opt-13b-h800-paper": _table1(4.0, BUDGETS, (0.01, 0.16, 0.18, 0.22, 0.19)),
}


def base_profile(name: str) -> LatencyProfile:
    return {p.name: p for p in derive.roofline_profiles()}[name]


def run_metrics(
    profile: LatencyProfile, run: tuple[str, float, int | None], seed: int = 0
) -> dict[str, float]:
    """One simulated run with the main comparison's stream and scheduler defaults."""
    from augserve.workload import ArrivalConfig, arrival_times_until, load_trace, resample
    from augserve.workload.registry import INFERCEPT_FILE, default_data_dir

    policy, rate, budget = run
    times = arrival_times_until(ArrivalConfig(rate), WINDOW, seed=seed)
    trace = load_trace(default_data_dir() / "infercept" / INFERCEPT_FILE)
    requests = resample(trace, len(times), seed=seed).to_requests(times)
    config = scheduler_config_for(profile, policy, max_batch_tokens=budget)
    result = simulate(requests, profile, config, WINDOW, 0.0, make_predictor("oracle"))
    slo = SLOConfig.from_iteration_time(profile.decode_iter_time())
    summary = compute_metrics(result.requests, slo, start=0.0, end=WINDOW).to_dict()
    return {k: float(v) for k, v in summary.items() if isinstance(v, int | float)}


def loss(values: Sequence[float], targets: Sequence[Target]) -> float:
    return sum(
        math.log((v + t.eps) / (t.value + t.eps)) ** 2 for v, t in zip(values, targets, strict=True)
    )


def _job(args: tuple[str, str, float, tuple[str, float, int | None]]) -> dict[str, float]:
    name, base, scale, run = args
    return run_metrics(derive.scaled_profile(base_profile(base), name, scale), run)


def evaluate(
    cal: Calibration, scales: Sequence[float], targets: Sequence[Target], workers: int
) -> dict[float, list[float]]:
    """Every target's simulated figure at every scale (runs in worker processes)."""
    runs = list(dict.fromkeys(t.run for t in targets))
    jobs = [(cal.name, cal.base, s, r) for s in scales for r in runs]
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            flat = list(pool.map(_job, jobs))
    else:
        flat = [_job(j) for j in jobs]
    out: dict[float, list[float]] = {}
    for i, s in enumerate(scales):
        got = dict(zip(runs, flat[i * len(runs) : (i + 1) * len(runs)], strict=True))
        out[s] = [got[t.run].get(t.metric, 0.0) for t in targets]
    return out


def fit(cal: Calibration, workers: int = 2, log: bool = True) -> tuple[float, dict[float, float]]:
    """The best scale (coarse grid, then fine around its best) and the loss curve."""
    curve: dict[float, float] = {}

    def run(scales: Sequence[float]) -> None:
        todo = [s for s in scales if s not in curve]
        for s, values in evaluate(cal, todo, cal.targets, workers).items():
            curve[s] = loss(values, cal.targets)
            if log:
                shown = ", ".join(f"{v:.3g}" for v in values)
                print(f"  {cal.name} x {s:.2f}: loss {curve[s]:.4f}  [{shown}]", flush=True)

    run(cal.coarse)
    best = min(curve, key=lambda s: (curve[s], s))
    step = cal.fine_step
    run([round(best + step * i, 4) for i in range(-cal.fine_span, cal.fine_span + 1) if i])
    best = min(curve, key=lambda s: (curve[s], s))
    return round(best, 4), dict(sorted(curve.items()))


def record(scales: dict[str, tuple[str, float]], path: Path | None = None) -> None:
    """Rewrite derive.py's CALIBRATED block with the fitted scales."""
    path = path or Path(derive.__file__)
    text = path.read_text(encoding="utf-8")
    body = "".join(f'    "{n}": ("{b}", {s!r}),\n' for n, (b, s) in scales.items())
    block = f"CALIBRATED: dict[str, tuple[str, float]] = {{\n{body}}}\n"
    new, count = re.subn(
        r"(# BEGIN CALIBRATED\n).*?(# END CALIBRATED)", rf"\g<1>{block}\g<2>", text, flags=re.S
    )
    if count != 1:
        raise RuntimeError(f"{path}: no CALIBRATED block to rewrite")
    path.write_text(new, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m augserve.sim.calibrate", description=__doc__)
    ap.add_argument("--only", help="fit only this calibrated profile")
    ap.add_argument("--workers", type=int, default=2)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="record the fit and write the JSON")
    mode.add_argument("--check", action="store_true", help="exit 1 if a fit moved")
    args = ap.parse_args(argv)
    fitted: dict[str, tuple[str, float]] = dict(derive.CALIBRATED)
    moved = []
    for cal in CALIBRATIONS:
        if args.only and cal.name != args.only:
            continue
        scale, _ = fit(cal, args.workers)
        print(f"{cal.name}: time scale {scale:g} (recorded: {fitted.get(cal.name)})")
        if fitted.get(cal.name) != (cal.base, scale):
            moved.append(cal.name)
        fitted[cal.name] = (cal.base, scale)
    if args.check:
        print("moved: " + ", ".join(moved) if moved else "all calibrations reproduce")
        return 1 if moved else 0
    if args.write:
        record(fitted)
        importlib.reload(derive)
        derive.main([])
    for name, (_, scale) in fitted.items():
        if name in CHECKS and (not args.only or name == args.only):
            held_out(name, scale, args.workers)
    return 0


def held_out(name: str, scale: float, workers: int = 2) -> None:
    """Print the figures the fit did not use, beside the paper's."""
    cal = next(c for c in CALIBRATIONS if c.name == name)
    values = evaluate(cal, [scale], CHECKS[name], workers)[scale]
    for t, v in zip(CHECKS[name], values, strict=True):
        print(
            f"  held out: {t.source} at {t.rate:g} req/s, {t.metric}: {v:.3g} (paper {t.value:g})"
        )


if __name__ == "__main__":
    sys.exit(main())
