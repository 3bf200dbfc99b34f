"""Our own policy, `augserve-slo`, against the strongest baselines (docs/results-own-policy.md).

    nice -n 10 python benchmarks/own_policy.py [--parts main,heldout,heldout-gptj] [--seeds 0,1,2]
                                               [--window 1800] [--workers 2]
                                               [--out runs/own-policy]

Windows are the paper's 30 minutes of arrivals (docs/paper.md section 7) unless --window.

- main: the INFERCEPT trace on the roofline and calibrated OPT-13B/H800
  profiles and GPT-J-6B/RTX 4090, Poisson arrivals, at a light rate and at the
  rate where the strongest baseline's SLO attainment is near 50%;
  `ssjf-infercept`, `augserve` and `augserve-slo`, each seed on the same stream.
- heldout (work not used while tuning), on the roofline profile: a ToolBench-like
  generator with other parameters (written to OUT/toolbench-alt.jsonl), the
  one-call INFERCEPT trace, Gamma arrivals with CV 2, and the noisy (+-50%) and
  learned predictors instead of the oracle.
- heldout-gptj: the same settings on GPT-J-6B/RTX 4090, every rate halved (its
  stress rate on the INFERCEPT trace is half the roofline profile's).
- ablation: each of our choices reverted alone, at the stress rates.

Besides the usual row, every point reports P99 TTFT and P99 normalized latency
over *all* requests that arrived in the window: a request without a first
token (or not finished) at the window's end counts with what it has waited so
far, a lower bound, so starvation cannot hide behind "unfinished". Writes
OUT/{part}.json and OUT/tables.md (mean and spread over the seeds). Finished
points are cached under OUT/cache-*/ (keyed on the point, the simulator's source
and this script's), so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from augserve.bench.cache import PointCache
from augserve.bench.pool import run_points
from augserve.bench.runner import BenchPoint, Row, default_trace_path, sim_point_row
from augserve.core.metrics import percentile
from augserve.core.request import Request
from augserve.sched.policies import POLICIES as REGISTRY
from augserve.sched.policies.slack import SlackPolicy

POLICIES = ("ssjf-infercept", "mars", "augserve", "augserve-slo")
OURS, STRONG = "augserve-slo", ("ssjf-infercept", "mars", "augserve")
# profile -> (light rate, rate where the strongest baseline attains ~50%)
RATES = {
    "opt-13b-h800": (3.0, 6.0),
    "opt-13b-h800-paper": (1.5, 3.0),
    "gptj-6b-rtx4090": (1.0, 3.0),
}
HELDOUT_PROFILE = "opt-13b-h800"
ROOT = Path(__file__).resolve().parent.parent
BACKEND = "__main__:run_point"  # worker processes are forked from this script


class AllRequests:
    """A probe: P99 TTFT / normalized latency over every request that arrived."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.sim: Any = None
        self.finished: list[Request] = []

    def attach(self, sim: Any) -> None:
        self.sim = sim

    def observe(self, end: float, out: Any, upd: Any) -> None:
        self.finished += [f.request for f in upd.finished]

    def summary(self) -> Row:
        end = self.window
        reqs = [
            r for r in (*self.finished, *self.sim.sched.live_requests()) if r.arrival_time < end
        ]
        ttft = [_ttft(r, end) for r in reqs]
        norm = [_norm(r, end) for r in reqs]
        return {"ttft_p99_all": percentile(ttft, 99), "norm_latency_p99_all": percentile(norm, 99)}


def _ttft(r: Request, end: float) -> float:
    first = (
        r.first_token_time if r.first_token_time is not None and r.first_token_time <= end else end
    )
    return first - r.arrival_time


def _norm(r: Request, end: float) -> float:
    stop = r.finish_time if r.finish_time is not None and r.finish_time <= end else end
    calls = sum(min(c.end if c.end is not None else stop, stop) - c.start for c in r.calls)
    return (stop - r.arrival_time - calls) / max(1, r.num_generated_tokens)


def run_point(point: BenchPoint) -> list[Row]:
    """The simulator backend with the all-request columns."""
    return [sim_point_row(replace(point, backend="sim"), AllRequests(point.window))]


class _TTFTOnly(SlackPolicy):
    name = "augserve-slo/ttft-only"
    norm_triage = False


class _NoAhead(SlackPolicy):
    name = "augserve-slo/ahead=0"
    ahead = 0.0


class _NoReserve(SlackPolicy):
    name = "augserve-slo/reserve=0"
    reserve = 0.0  # no rescues of the oldest lost requests (default: 0.05 per second)


class _NoGate(SlackPolicy):
    name = "augserve-slo/admit=0"
    admit_growth = 0.0  # no admission gate (default: 0.2 of the holders' growth kept free)


ABLATION = (_TTFTOnly, _NoAhead, _NoReserve, _NoGate)  # each of our choices reverted alone
for _cls in ABLATION:
    REGISTRY.setdefault(_cls.name, _cls)  # here and in the forked workers only


# --- the points ------------------------------------------------------------------------
def main_points(seeds: Sequence[int], window: float) -> list[BenchPoint]:
    trace = str(default_trace_path())
    return [
        BenchPoint(p, r, seed=s, backend=BACKEND, trace=trace, profile=prof, window=window)
        for prof, rates in RATES.items()
        for r in rates
        for p in POLICIES
        for s in seeds
    ]


def ablation_points(seeds: Sequence[int], window: float) -> list[BenchPoint]:
    trace = str(default_trace_path())
    return [
        BenchPoint(
            c.name, rates[1], seed=s, backend=BACKEND, trace=trace, profile=prof, window=window
        )  # fmt: skip
        for prof, rates in RATES.items()
        for c in ABLATION
        for s in seeds
    ]


def toolbench_alt(path: Path) -> str:
    """A ToolBench-like trace with other parameters than the shipped generator's."""
    import numpy as np

    from augserve.workload.generators import TOOLBENCH_PROFILE, from_profiles
    from augserve.workload.jsonl import write_jsonl
    from augserve.workload.profiles import LogNormal

    alt = replace(
        TOOLBENCH_PROFILE,
        kind="toolbench-alt",
        calls_pmf=(0.05, 0.25, 0.30, 0.25, 0.15),  # 0..4 calls, mean 2.2 (shipped: 3.7)
        prompt_len=LogNormal(float(np.log(700.0)), 0.5, 100.0, 3000.0),  # shipped: 1200
        output_len=LogNormal(float(np.log(120.0)), 0.8, 5.0, 800.0),  # shipped: 60
        call_time=LogNormal(float(np.log(4.0)), 1.2, 0.05, 90.0),  # shipped: 1.5 s
        return_len=LogNormal(float(np.log(120.0)), 0.9, 5.0, 1500.0),  # shipped: 200
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(path, from_profiles({"toolbench-alt": alt}, 2000, 7, "toolbench-alt"))
    return str(path)


def learned_predictor(out: Path) -> str:
    """The learned predictor (metadata only, no MiniLM), trained on 80% of the INFERCEPT
    trace's requests (the CLI's default split), written to OUT/predictor once."""
    path = out / "predictor"
    if not (path / "manifest.json").exists():
        from augserve.cli import main as cli

        trace = str(default_trace_path())
        cli(["predictor", "train", "--trace", trace, "--out", str(path), "--no-embed"])
    return f"learned:{path}"


# held-out settings: name -> rates on the roofline OPT-13B profile (where the strongest
# baseline attains about half its SLO at the higher rate); on GPT-J, whose stress rate on
# the INFERCEPT trace is half the roofline's (3 vs 6 req/s), every rate is halved
HELDOUT_RATES = {
    "toolbench-alt": (1.0, 2.5),
    "one-call trace": (20.0,),
    "gamma CV 2": (5.0,),
    "noisy:0.5 predictor": (6.0,),
    "learned predictor": (6.0,),
}
HELDOUT_PARTS = {"heldout": (HELDOUT_PROFILE, 1.0), "heldout-gptj": ("gptj-6b-rtx4090", 0.5)}


def heldout_points(
    seeds: Sequence[int], window: float, out: Path, part: str = "heldout"
) -> list[BenchPoint]:
    profile, scale = HELDOUT_PARTS[part]
    trace = str(default_trace_path())
    oneapi = str(default_trace_path().parent / "diverse_oneapi_merged_exp_uniform.json")
    base = BenchPoint(OURS, 1.0, backend=BACKEND, trace=trace, profile=profile, window=window)
    settings = {
        "toolbench-alt": replace(base, trace=toolbench_alt(out / "toolbench-alt.jsonl")),
        "one-call trace": replace(base, trace=oneapi),
        "gamma CV 2": replace(base, arrival="gamma:2"),
        "noisy:0.5 predictor": replace(base, predictor="noisy:0.5"),
        "learned predictor": replace(base, predictor=learned_predictor(out)),
    }
    return [
        replace(b, policy=p, rate=r * scale, seed=s)
        for name, b in settings.items()
        for r in HELDOUT_RATES[name]
        for p in POLICIES
        for s in seeds
    ]


# --- tables ------------------------------------------------------------------------------
COLUMNS = (
    ("goodput", "goodput", ".3f"),
    ("slo_attainment", "SLO att.", ".3f"),
    ("throughput_rps", "thr.", ".2f"),
    ("ttft_p99_all", "TTFT p99 (all)", ".1f"),
    ("norm_latency_p99_all", "norm. lat. p99 (all)", ".2f"),
    ("long_quartile_finished_share", "long-quartile share", ".3f"),
)


def _setting(r: Row) -> tuple[Any, ...]:
    trace = Path(r["trace"]).stem if r.get("trace") else r.get("workload")
    pred = "learned" if str(r["predictor"]).startswith("learned:") else r["predictor"]
    return (r["profile"], trace, r["arrival"], pred, float(r["rate"]))


def _stat(xs: Sequence[float]) -> str:
    if not xs:
        return "-"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.3g} ± {sd:.2g}"


ABL_POLICIES = (*POLICIES, *(c.name for c in ABLATION))


def table(rows: Sequence[Row], policies: Sequence[str] = POLICIES) -> str:
    groups: dict[tuple[Any, ...], dict[str, list[Row]]] = {}
    for r in rows:
        groups.setdefault(_setting(r), {}).setdefault(r["policy"], []).append(r)
    head = "| setting | policy | " + " | ".join(c[1] for c in COLUMNS) + " | ours / strongest |"
    out = [head, "|" + "---|" * (len(COLUMNS) + 3)]
    for setting, by in groups.items():
        label = " ".join(str(x) for x in setting if x not in ("poisson", "oracle"))
        for pol in policies:
            members = by.get(pol, [])
            cells = [
                _stat([float(m[k]) for m in members if m.get(k) is not None]) for k, _, _ in COLUMNS
            ]
            ratio = _ratio(by, pol) if pol.startswith(OURS) else ""
            out.append(f"| {label} | {pol} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(out)


def _ratio(by: dict[str, list[Row]], pol: str = OURS) -> str:
    """Our goodput over the strongest baseline's, seed by seed (same stream): mean, min."""
    ours = {m["seed"]: m["goodput"] for m in by.get(pol, [])}
    ratios = []
    for seed, g in ours.items():
        best = max(
            (m["goodput"] for p in STRONG for m in by.get(p, []) if m["seed"] == seed), default=0
        )
        if best > 0:
            ratios.append(g / best)
    if not ratios:
        return "-"
    return f"{statistics.mean(ratios):.3f}x (min {min(ratios):.3f}x)"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="main,heldout")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--window", type=float, default=1800.0, help="seconds of arrivals")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "own-policy")
    ap.add_argument(
        "--profiles",
        default=None,
        help="run only these profiles (comma-separated; main and ablation parts) and"
        " merge their rows into the part's existing results, replacing their old rows",
    )
    ap.add_argument(
        "--only-policies",
        default=None,
        help="run only these policies (comma-separated) and merge their rows into the"
        " part's existing results, replacing that policy's old rows",
    )
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    for part in args.parts.split(","):
        if part == "main":
            pts = main_points(seeds, args.window)
        elif part in HELDOUT_PARTS:
            pts = heldout_points(seeds, args.window, args.out, part)
        elif part == "ablation":
            pts = ablation_points(seeds, args.window)
        else:
            raise SystemExit(
                f"--parts: unknown part {part!r} (main, heldout, heldout-gptj, ablation)"
            )
        only = set(args.only_policies.split(",")) if args.only_policies else None
        profiles = set(args.profiles.split(",")) if args.profiles else None
        if profiles is not None and not profiles <= set(RATES):
            raise SystemExit(f"--profiles: unknown {sorted(profiles - set(RATES))}")
        pts = [
            pt
            for pt in pts
            if (only is None or pt.policy in only) and (profiles is None or pt.profile in profiles)
        ]
        rows = run_cached(pts, args.workers, args.out, desc=f"own-policy {part}")
        path = args.out / f"{part}.json"
        if (only is not None or profiles is not None) and path.exists():
            kept = [
                r
                for r in json.loads(path.read_text())
                if not (
                    (only is None or r["policy"] in only)
                    and (profiles is None or r["profile"] in profiles)
                )
            ]
            rows = kept + rows
        path.write_text(json.dumps(rows, indent=1, default=str))
        print(f"{part}: {len(pts)} points", flush=True)
        write_tables(args.out)
    return 0


def run_cached(pts: Sequence[BenchPoint], workers: int, out: Path, desc: str) -> list[Row]:
    """Run the points not finished before (cached under OUT/cache-<hash of this script>/,
    keyed also on the simulator's source), so that an interrupted part resumes."""
    own = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:12]
    cache = PointCache(out / f"cache-{own}", code=True)
    done = {i: rows for i, p in enumerate(pts) if (rows := cache.get(p)) is not None}
    todo = [i for i in range(len(pts)) if i not in done]
    if done:
        print(f"{desc}: {len(done)} of {len(pts)} points from the cache", flush=True)

    def finished(j: int, rows: list[Row]) -> None:
        done[todo[j]] = rows
        cache.put(pts[todo[j]], rows)

    run_points([pts[i] for i in todo], workers=workers, on_result=finished, desc=desc)
    return [row for i in range(len(pts)) for row in done[i]]


def write_tables(out: Path) -> None:
    text = []
    rows: dict[str, list[Row]] = {}
    for part in ("main", *HELDOUT_PARTS, "ablation"):
        path = out / f"{part}.json"
        if path.exists():
            rows[part] = json.loads(path.read_text())
    if "main" in rows:
        text += ["## main", "", table(rows["main"]), ""]
    for part in HELDOUT_PARTS:
        if part in rows:
            text += [f"## {part}", "", table(rows[part]), ""]
    if "ablation" in rows and "main" in rows:
        stress = {(p, r[1]) for p, r in RATES.items()}
        base = [r for r in rows["main"] if (r["profile"], float(r["rate"])) in stress]
        text += ["## ablation", "", table(base + rows["ablation"], ABL_POLICIES), ""]
    (out / "tables.md").write_text("\n".join(text))
    print((out / "tables.md").read_text())


if __name__ == "__main__":
    sys.exit(main())
