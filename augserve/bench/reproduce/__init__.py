"""`augserve reproduce`: the paper's whole evaluation in the simulator, as one report.

Each section of the report is a module `s_*.py` with a `SECTION` (`plan.Section`):
the points it needs and how it renders them. `spec.py` holds the experiments as
data, `paper.py` the paper's numbers, `execute.py` runs the points (cached,
locally or on Ray), `report.py` writes the Markdown. `sections()` lists them in
the report's order.
"""

from __future__ import annotations

import importlib

from augserve.bench.reproduce.plan import Section

SECTION_MODULES = (
    "s_e2e",
    "s_budget",
    "s_ablation",
    "s_predictor",
    "s_sensitivity",
    "s_workloads",
    "s_latency",
    "s_overhead",
    "s_beyond",
)


def sections() -> list[Section]:
    """Every section, in the report's order."""
    return [
        importlib.import_module(f"augserve.bench.reproduce.{name}").SECTION
        for name in SECTION_MODULES
    ]
