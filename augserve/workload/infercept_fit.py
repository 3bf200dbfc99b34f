"""INFERCEPT per-kind profiles, fitted from merged_exp_uniform.json.

The numbers live in `augserve/data/infercept/fitted_profiles.json`, written from
`augserve.workload.profiles.fit_profiles(load_infercept(...))` (6 significant digits);
tests/workload/test_generators.py checks that a fresh fit of the real file still gives
them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from augserve.workload.profiles import KindProfile, LogNormal

FITTED = Path(__file__).resolve().parents[1] / "data" / "infercept" / "fitted_profiles.json"
DISTRIBUTIONS = ("prompt_len", "output_len", "call_time", "return_len")


def _pmf(probs: list[float]) -> tuple[float, ...]:
    """Normalized: the file's 6-digit probabilities need not sum to exactly 1."""
    total = sum(probs)
    return tuple(p / total for p in probs)


def _profile(kind: str, row: dict[str, Any]) -> KindProfile:
    dists = {name: LogNormal(**row[name]) for name in DISTRIBUTIONS}
    return KindProfile(
        kind=kind,
        weight=row["weight"],
        calls_pmf=_pmf(row["calls_pmf"]),
        same_call_time=row["same_call_time"],
        tool=row["tool"],
        **dists,
    )


def load_profiles(path: Path = FITTED) -> dict[str, KindProfile]:
    """The per-kind profiles of a fitted-profiles JSON file, by kind."""
    rows = json.loads(path.read_text())["profiles"]
    return {kind: _profile(kind, row) for kind, row in rows.items()}


INFERCEPT_PROFILES: dict[str, KindProfile] = load_profiles()
