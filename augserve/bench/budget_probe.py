"""A probe that counts how the dynamic token budget departs from the static one.

Per iteration it compares `SchedulerOutput.token_budget` with the static budget
T_max (`SchedulerConfig.max_batch_tokens`) and checks whether the budget was
binding (the batch filled it exactly: with chunked prefill the packer stops
only when the budget, the batch size or the requests run out). A dynamic
budget can change a decision only in an iteration where it differs from T_max
and, when below T_max, the batch took more than it; the probe counts those
too. It also keeps the live-request counts (running + paused + waiting), to
size the overhead measurements at what a run actually reaches.
"""

from __future__ import annotations

from typing import Any

Row = dict[str, Any]


class BudgetProbe:
    def __init__(self) -> None:
        self.sim: Any = None
        self.t_max = 0
        self.iterations = 0
        self.below = 0  # budget < T_max
        self.above = 0  # budget > T_max (beta_high > 1)
        self.gap_tokens = 0  # sum of |budget - T_max| over the iterations that differ
        self.min_budget: int | None = None
        self.filled = 0  # the batch took the whole budget
        self.filled_below = 0  # ... in an iteration whose budget was below T_max
        self.filled_static = 0  # the batch would have filled T_max (it took >= T_max)
        self.live_max = 0
        self.live_sum = 0

    def attach(self, sim: Any) -> None:
        self.sim = sim
        self.t_max = sim.config.max_batch_tokens

    def observe(self, end: float, out: Any, upd: Any) -> None:
        budget, used, t_max = out.token_budget, out.num_scheduled_tokens, self.t_max
        self.iterations += 1
        if budget != t_max:
            self.gap_tokens += abs(budget - t_max)
            if budget < t_max:
                self.below += 1
            else:
                self.above += 1
        if self.min_budget is None or budget < self.min_budget:
            self.min_budget = budget
        if used >= budget:
            self.filled += 1
            if budget < t_max:
                self.filled_below += 1
        if used >= t_max:
            self.filled_static += 1
        live = self.sim.sched.num_live
        self.live_max = max(self.live_max, live)
        self.live_sum += live

    def summary(self) -> Row:
        n = max(1, self.iterations)
        differ = self.below + self.above
        return {
            "budget_t_max": self.t_max,
            "budget_iterations": self.iterations,
            "budget_below": self.below,
            "budget_above": self.above,
            "budget_differ_share": differ / n,
            "budget_mean_gap": self.gap_tokens / differ if differ else 0.0,
            "budget_min": self.min_budget if self.min_budget is not None else 0,
            "budget_filled": self.filled,
            "budget_filled_below": self.filled_below,
            "budget_filled_static": self.filled_static,
            "live_max": self.live_max,
            "live_mean": self.live_sum / n,
        }
