"""The paper's numbers (arXiv 2512.04013 v3; docs/paper.md section 8), as data.

Goodput in req/s, TTFT in s, overhead in s per iteration. Changes are AugServe
against the baseline (geometric means over the paper's settings).
"""

from __future__ import annotations

from collections.abc import Mapping

# AugServe / baseline goodput, geomean over all settings (figure 7 alone in brackets)
GOODPUT_RATIO: Mapping[str, float] = {"vllm": 6.5, "infercept": 4.7, "ssjf": 1.9, "mars": 3.07}
GOODPUT_RATIO_FIG7: Mapping[str, float] = {"vllm": 7.5, "infercept": 5.7, "ssjf": 1.9}
TTFT_CHANGE: Mapping[str, float] = {"vllm": -0.956, "infercept": -0.960, "ssjf": -0.925}
NL_CHANGE: Mapping[str, float] = {"vllm": -0.778, "infercept": -0.728, "ssjf": -0.365}
# D.6, over the INFERCEPT and mixed workloads (figures 13-14)
MARS = {"goodput_ratio": 3.07, "max_ratio": 4.78, "ttft_change": -0.921, "nl_change": -0.389}
# figure 7's one quoted point: OPT-13B/H800, ToolBench, 5 req/s
FIG7_TOOLBENCH_5 = {"vllm": 0.0, "infercept": 0.0, "augserve": 2.4}

# table 1: (setup, rate) -> goodput by max batch tokens
BUDGETS = (100, 500, 1000, 1500, 2000)
TABLE1: Mapping[tuple[str, float], tuple[float, ...]] = {
    ("gptj-6b-rtx4090", 2.0): (0.29, 0.41, 0.25, 0.11, 0.10),
    ("opt-13b-h800", 4.0): (0.01, 0.16, 0.18, 0.22, 0.19),
}

# table 2: OPT-13B/H800, 3 req/s, INFERCEPT: label -> (mean TTFT, goodput)
TABLE2: Mapping[str, tuple[float, float]] = {
    "Base (INFERCEPT)": (306.26, 0.15),
    "+B (dynamic budget)": (293.51, 0.21),
    "+S (state-aware scheduling)": (14.53, 0.93),
    "AugServe": (3.88, 1.07),
}

# table 5: beta -> (goodput at 3, at 5 req/s), (P99 TTFT at 3, at 5 req/s)
TABLE5_GOODPUT: Mapping[float, tuple[float, float]] = {
    1e-3: (1.01, 0.82),
    1e-4: (1.12, 0.94),
    5e-5: (1.07, 0.90),
    1e-5: (1.04, 0.94),
    1e-6: (1.02, 0.86),
}
TABLE5_TTFT99: Mapping[float, tuple[float, float]] = {
    1e-3: (276.02, 298.65),
    1e-4: (109.05, 152.84),
    5e-5: (98.66, 157.45),
    1e-5: (111.89, 166.99),
    1e-6: (278.10, 226.58),
}
TABLE5_RATES = (3.0, 5.0)

# table 7: (rate, CV) -> goodput of vllm, infercept, ssjf, augserve
TABLE7_POLICIES = ("vllm", "infercept", "ssjf", "augserve")
TABLE7: Mapping[tuple[float, float], tuple[float, float, float, float]] = {
    (2.0, 1.0): (0.21, 0.28, 0.49, 0.85),
    (2.0, 1.5): (0.09, 0.13, 0.52, 0.82),
    (2.0, 2.0): (0.06, 0.08, 0.39, 0.78),
    (3.0, 1.0): (0.14, 0.20, 0.50, 1.03),
    (3.0, 1.5): (0.07, 0.11, 0.54, 0.81),
    (3.0, 2.0): (0.04, 0.06, 0.23, 0.42),
}

# table 3: rate -> (INFERCEPT, AugServe) s per iteration
TABLE3: Mapping[float, tuple[float, float]] = {3.0: (0.013, 0.018), 4.0: (0.015, 0.022)}
# table 6: paused-request bin -> (INFERCEPT, AugServe) s per iteration (None: not reported)
PAUSED_BINS: tuple[tuple[str, int, int | None], ...] = (
    ("<50", 0, 50),
    ("50-100", 50, 100),
    ("100-150", 100, 150),
    ("150-200", 150, 200),
    (">=200", 200, None),
)
TABLE6: Mapping[str, tuple[float | None, float]] = {
    "<50": (0.002, 0.002),
    "50-100": (0.014, 0.008),
    "100-150": (0.013, 0.016),
    "150-200": (None, 0.025),
    ">=200": (None, 0.021),
}

# figure 8 (no numbers printed): goodput and normalized latency "largely stable", TTFT up by
# "roughly 10-20 s" at 40-50% error; the paper's BERT predictor: 65% bucket accuracy on INFERCEPT
FIG8_TTFT_RISE_S = (10.0, 20.0)
PREDICTION_OVERHEAD_S = 0.18  # per request (section 6.2)
