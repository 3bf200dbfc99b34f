"""The budget probe's counts (benchmarks/dynamic_budget.py, issue 28)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from augserve.bench.budget_probe import BudgetProbe
from augserve.bench.runner import BenchPoint, sim_point_row


def _out(budget: int, used: int) -> SimpleNamespace:
    return SimpleNamespace(token_budget=budget, num_scheduled_tokens=used)


def test_counts_iterations_where_the_budget_differs_and_binds() -> None:
    probe = BudgetProbe()

    class Sched:
        counts = iter([3, 5, 4, 2])

        @property
        def num_live(self) -> int:
            return next(self.counts)

    probe.attach(SimpleNamespace(config=SimpleNamespace(max_batch_tokens=100), sched=Sched()))
    for budget, used in ((100, 100), (60, 60), (80, 20), (150, 120)):
        probe.observe(0.0, _out(budget, used), None)
    s = probe.summary()
    assert (s["budget_iterations"], s["budget_below"], s["budget_above"]) == (4, 2, 1)
    assert s["budget_mean_gap"] == pytest.approx((40 + 20 + 50) / 3)
    assert s["budget_min"] == 60
    assert (s["budget_filled"], s["budget_filled_below"], s["budget_filled_static"]) == (2, 1, 2)
    assert (s["live_max"], s["live_mean"]) == (5, 3.5)


def test_a_static_budget_never_differs_in_a_simulation() -> None:
    point = BenchPoint(
        "infercept",
        3.0,
        workload="infercept-like",
        window=20.0,
        overrides=(("dynamic_budget", "false"),),
    )
    row = sim_point_row(point, BudgetProbe())
    assert row["budget_iterations"] == row["iterations"] > 0
    assert row["budget_below"] == row["budget_above"] == 0
    assert row["budget_t_max"] == 1500 and row["live_max"] >= 1
    two = sim_point_row(
        BenchPoint("infercept", 3.0, workload="infercept-like", window=20.0,
                   overrides=(("dynamic_budget", "true"), ("beta_high", "2.0"))),
        BudgetProbe(),
    )  # fmt: skip
    assert two["budget_above"] > 0  # memory is plentiful: the budget rises to 2 x T_max
