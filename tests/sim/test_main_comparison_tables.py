"""benchmarks/main_comparison.py's ablation table: each change against the final defaults,
with a cell per rate, and "-" where a cut-short run has no row."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "main_comparison", ROOT / "benchmarks/main_comparison.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["main_comparison"] = mod
    spec.loader.exec_module(mod)
    return mod


def _row(policy: str, rate: float, goodput: float, overrides: str = "") -> dict[str, Any]:
    return {"profile": "opt-13b-h800", "policy": policy, "rate": rate, "goodput": goodput,
            "overrides": overrides}  # fmt: skip


def test_ablation_table_marks_rates_a_cut_short_run_did_not_reach() -> None:
    mc = _module()
    main = [
        _row(p, r, g)
        for p, g in (("augserve", 2.0), ("ssjf", 0.5), ("ssjf-infercept", 1.0))
        for r in (3.0, 6.0)
    ]
    ablation = [
        _row("augserve", 3.0, 1.0, "beta_high=2.0"),
        _row("augserve", 6.0, 0.5, "beta_high=2.0"),
        _row("augserve", 3.0, 4.0, "segment_cost=true"),  # its rate 6 did not run
    ]
    lines = mc.ablation_table(main, ablation, "opt-13b-h800").splitlines()
    assert "3 / 6 req/s" in lines[0]
    beta = next(line for line in lines if line.startswith("| 1. beta_high"))
    assert "| 2.000 -> 1.000 / 2.000 -> 0.500 | 2.83x |" in beta  # geomean of 2x and 4x
    seg = next(line for line in lines if "fixed per segment" in line)
    assert "| 2.000 -> 4.000 / - | 0.50x |" in seg
    assert not any("V2 block triangle" in line for line in lines)  # no row ran
    ssjf = next(line for line in lines if line.startswith("| 2. ssjf"))
    assert "| 0.500 -> 1.000 / 0.500 -> 1.000 | 0.50x |" in ssjf


def test_swap_rate_revert_is_the_profiles_host_link_not_the_default() -> None:
    # `mars_swap_rate=None` would be dropped by scheduler_config_for (None: not given),
    # leaving V2's 2 blocks/s in place: the revert names the profile's rate instead
    from augserve.bench.runner import point_scheduler_config
    from augserve.profiles import load_profile
    from augserve.sched.policies.mars_rank import BLOCK

    mc = _module()
    for name in mc.PROFILES:
        pt = mc.points(["mars"], name, (("mars_swap_rate", mc.HOST_LINK),), [3.0])[0]
        profile = load_profile(name)
        rate = point_scheduler_config(pt, profile).mars_swap_rate
        assert rate == 1.0 / profile.swap_time(BLOCK)
        assert rate > 100.0  # blocks per second: nothing like V2's hard-coded 2
