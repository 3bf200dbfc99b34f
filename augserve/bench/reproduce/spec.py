"""The experiments of `augserve reproduce`, as data.

Everything a section runs is read from here: the setups and their profiles,
the workloads, the policies, the rates, windows and seeds of each scale
(`QUICK`, `FULL`), and the scheduler options of the ablation. Profiles are
resolved when a run starts (`profiles_for`), so a profile added to
`augserve.profiles` (a calibrated one) is picked up without a change here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from augserve.bench.runner import BenchPoint

# the paper's setups (section 6), by their roofline profile, and their labels
SETUPS: Mapping[str, str] = {
    "gptj-6b-rtx4090": "GPT-J-6B / RTX 4090",
    "opt-13b-h800": "OPT-13B / H800",
    "vicuna-13b-2xa100": "Vicuna-13B / 2xA100",
    "llama3-70b-4xa100": "Llama-3-70B / 4xA100",
}
# calibrated profiles (fitted to the paper's own numbers), used first where they exist
CALIBRATED: Mapping[str, str] = {
    "opt-13b-h800": "opt-13b-h800-paper",
    "gptj-6b-rtx4090": "gptj-6b-rtx4090-paper",
}
MAIN_SETUP = "opt-13b-h800"  # the paper's single-setup experiments (tables 2-7, figures 8-18)
FIG7_SETUPS = ("gptj-6b-rtx4090", "opt-13b-h800", "vicuna-13b-2xa100")

# workloads by `make_workload` name (resolved in the worker: nothing to ship to Ray nodes)
INFERCEPT = "infercept"
TOOLBENCH = "toolbench-like"
MIXED = "mixed:0.5:infercept"  # paper D.1: INFERCEPT with the calls of half the requests off
WORKLOADS: Mapping[str, str] = {
    INFERCEPT: "INFERCEPT trace",
    TOOLBENCH: "ToolBench-like",
    MIXED: "mixed: INFERCEPT, 50% without calls",
}

OWN = "augserve-slo"  # our own policy (docs/results-own-policy.md), not in the paper
POLICIES = ("vllm", "infercept", "ssjf", "ssjf-infercept", "mars", "augserve", OWN)
PAPER_BASELINES = ("vllm", "infercept", "ssjf", "mars")  # the ones the paper compares against
STRONGEST = "ssjf-infercept"  # our stronger baseline (docs/paper.md section 6), not in the paper

# ablation variants: label -> (policy, scheduler options). The option names live only here.
ABLATION: Mapping[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "Base (INFERCEPT)": ("infercept", ()),
    "+B (dynamic budget)": ("infercept", (("dynamic_budget", "true"),)),
    "+S (state-aware scheduling)": ("augserve", (("dynamic_budget", "false"),)),
    "AugServe": ("augserve", ()),
    "AugServe, beta_high = 2.0": ("augserve", (("beta_high", "2.0"),)),
    "AugServe, cost fixed per segment (Alg. 1)": ("augserve", (("segment_cost", "true"),)),
}
BUDGET_POLICIES = ("infercept", "augserve")  # table 1; augserve with a static budget
BUDGET_STATIC = (("dynamic_budget", "false"),)
BETAS = (1e-3, 1e-4, 5e-5, 1e-5, 1e-6)
CVS = (1.0, 1.5, 2.0)


@dataclass(frozen=True)
class Scale:
    """How much of each experiment to run: rates, windows (seconds of arrivals and of
    measurement, no drain), seeds. `both_profiles`: the sections that also run on the
    roofline profile when a calibrated one exists."""

    name: str
    drain: float  # seconds of serving after arrivals stop (the paper: 0)
    window: float  # rate sweeps (figures 7, 11-18)
    table_window: float  # single-setting tables (1, 2, 5, 7) and figure 8
    seeds: tuple[int, ...]
    rates: Mapping[str, tuple[float, ...]]  # setup -> rates of its sweeps
    toolbench_rates: Mapping[str, tuple[float, ...]]
    budget_rates: Mapping[str, float]  # table 1: setup -> rate
    budgets: tuple[int, ...]
    ablation_rates: tuple[float, ...]
    beta_rates: tuple[float, ...]
    burst_rates: tuple[float, ...]
    noise: tuple[float, ...]
    predictor_rates: tuple[float, ...]
    learned_embed: bool  # MiniLM prompt embeddings in the learned predictor
    occupancy_rate: float
    breakdown_rate: float
    overhead_rates: tuple[float, ...]
    both_profiles: tuple[str, ...] = ()
    fig7_setups: tuple[str, ...] = FIG7_SETUPS
    extra: Mapping[str, str] = field(default_factory=dict)


FULL = Scale(
    name="full",
    drain=0.0,
    window=900.0,
    table_window=1800.0,
    seeds=(0,),
    rates={
        "gptj-6b-rtx4090": (0.5, 1.0, 1.5, 2.0, 3.0),
        "opt-13b-h800": (2.0, 3.0, 4.0, 5.0, 6.0),
        "vicuna-13b-2xa100": (1.0, 2.0, 3.0, 4.0, 5.0),
        "llama3-70b-4xa100": (0.5, 1.0, 1.5, 2.0, 3.0),
    },
    # the ToolBench-like generator is heavier (1,258-token prompts, 1,026 returned tokens
    # per request on average): its sweeps sit lower
    toolbench_rates={
        "gptj-6b-rtx4090": (0.25, 0.5, 0.75, 1.0, 1.5),
        "opt-13b-h800": (0.5, 1.0, 1.5, 2.0, 3.0),
        "vicuna-13b-2xa100": (0.5, 1.0, 1.5, 2.0, 3.0),
    },
    budget_rates={"gptj-6b-rtx4090": 2.0, "opt-13b-h800": 4.0},
    budgets=(100, 500, 1000, 1500, 2000),
    ablation_rates=(3.0, 4.0, 5.0),
    beta_rates=(3.0, 5.0),
    burst_rates=(2.0, 3.0),
    noise=(0.1, 0.2, 0.3, 0.4, 0.5),
    predictor_rates=(3.0, 4.0, 5.0),
    learned_embed=True,
    occupancy_rate=3.0,
    breakdown_rate=4.0,
    overhead_rates=(3.0, 4.0, 6.0),
    both_profiles=("e2e", "budget", "ablation"),
)

QUICK = replace(
    FULL,
    name="quick",
    drain=90.0,
    window=180.0,
    table_window=150.0,
    rates={
        "gptj-6b-rtx4090": (1.0, 2.0),
        "opt-13b-h800": (3.0, 5.0),
        "vicuna-13b-2xa100": (2.0, 4.0),
        "llama3-70b-4xa100": (1.0, 2.0),
    },
    toolbench_rates={
        "gptj-6b-rtx4090": (0.5, 1.0),
        "opt-13b-h800": (1.0, 2.0),
        "vicuna-13b-2xa100": (1.0, 2.0),
    },
    budgets=(100, 500, 1500, 2000),
    ablation_rates=(3.0, 5.0),
    beta_rates=(5.0,),
    burst_rates=(3.0,),
    noise=(0.2, 0.5),
    predictor_rates=(4.0,),
    learned_embed=False,
    overhead_rates=(4.0,),
    both_profiles=(),
)
SCALES = {"quick": QUICK, "full": FULL}


def profiles_for(setup: str, available: tuple[str, ...], both: bool) -> tuple[str, ...]:
    """The profiles a setup runs on: its calibrated one if it exists (first), and the
    roofline one too when `both` or when there is no calibrated one."""
    calibrated = CALIBRATED.get(setup)
    if calibrated is not None and calibrated in available:
        return (calibrated, setup) if both else (calibrated,)
    return (setup,)


def setup_of(profile: str) -> str:
    """The setup a profile models (a calibrated profile's roofline name)."""
    for setup, calibrated in CALIBRATED.items():
        if profile == calibrated:
            return setup
    return profile


def profile_label(profile: str) -> str:
    kind = "calibrated" if profile in CALIBRATED.values() else "roofline"
    return f"{SETUPS.get(setup_of(profile), profile)} ({kind}: `{profile}`)"


def point(
    policy: str,
    rate: float,
    profile: str,
    workload: str,
    window: float,
    drain: float,
    seed: int = 0,
    **fields: object,
) -> BenchPoint:
    """A simulator point on a named workload (oracle predictor unless given)."""
    return BenchPoint(
        policy=policy,
        rate=rate,
        seed=seed,
        workload=workload,
        profile=profile,
        window=window,
        drain=drain,
        **fields,  # type: ignore[arg-type]
    )


FITTED_MARK = " (fitted)"


def fitted(profile: str, policy: str, rate: float, budget: int | None = None) -> list[str]:
    """The paper's figures a calibrated profile was fitted on at this cell (policy and rate
    on the INFERCEPT trace under Poisson arrivals; `augserve.sim.calibrate`): such a cell
    reproduces nothing, it is shown marked and kept out of the report's verdicts."""
    from augserve.sim.calibrate import CALIBRATIONS

    return [
        f"{t.source} {t.metric}"
        for cal in CALIBRATIONS
        if cal.name == profile
        for t in cal.targets
        if (t.policy, t.rate, t.max_batch_tokens) == (policy, rate, budget)
    ]
