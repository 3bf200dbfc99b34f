"""A tiny `augserve reproduce --quick` scale for the tests: one rate per setup, windows of
25-30 s, so that a section runs in seconds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from augserve.bench.reproduce import spec

TINY = replace(
    spec.QUICK,
    window=30.0,
    table_window=25.0,  # not the sweeps' window: no point shared between sections
    drain=10.0,
    rates={k: v[:1] for k, v in spec.QUICK.rates.items()},
    toolbench_rates={k: v[:1] for k, v in spec.QUICK.toolbench_rates.items()},
    budgets=(500, 1500),
    ablation_rates=(3.0,),
    noise=(0.5,),
    overhead_rates=(3.0,),
    learned_embed=False,
)


@pytest.fixture
def tiny_quick(monkeypatch: pytest.MonkeyPatch) -> spec.Scale:
    """`--quick` runs the TINY scale for the duration of a test."""
    monkeypatch.setitem(spec.SCALES, "quick", TINY)
    return TINY
