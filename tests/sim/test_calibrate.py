"""The calibration procedure (augserve.sim.calibrate): loss, grid search, record."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from augserve.profiles import derive
from augserve.sim import calibrate
from augserve.sim.calibrate import Calibration, Target


def test_loss_is_squared_log_ratio_with_eps() -> None:
    good = Target("t", "infercept", 3.0, "goodput", 0.15)
    ttft = Target("t", "infercept", 3.0, "ttft_mean", 306.0)
    # (log(0.31 / 0.16))^2 + (log(154 / 307))^2, by hand
    want = math.log(0.31 / 0.16) ** 2 + math.log(154.0 / 307.0) ** 2
    assert calibrate.loss([0.30, 153.0], [good, ttft]) == pytest.approx(want)
    assert calibrate.loss([0.15, 306.0], [good, ttft]) == 0.0
    # a zero goodput is finite: log(0.01 / 0.16)^2
    assert calibrate.loss([0.0], [good]) == pytest.approx(math.log(0.01 / 0.16) ** 2)


def test_fit_takes_the_best_coarse_point_then_refines_around_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a fake simulator whose goodput falls as 1 / scale: the target 0.5 is met at 2.13
    def fake(cal, scales, targets, workers):  # type: ignore[no-untyped-def]
        return {s: [1.065 / s for _ in targets] for s in scales}

    monkeypatch.setattr(calibrate, "evaluate", fake)
    cal = Calibration("x", "opt-13b-h800", (Target("t", "vllm", 3.0, "goodput", 0.5),))
    scale, curve = calibrate.fit(cal, log=False)
    assert scale == pytest.approx(2.15)  # fine grid of step 0.05 around the coarse 2.25
    assert min(curve, key=curve.__getitem__) == scale
    assert {1.0, 4.0, 2.05, 2.45} <= set(curve)  # coarse ends and the fine span
    assert list(curve) == sorted(curve)


def test_record_rewrites_only_the_calibrated_block(tmp_path: Path) -> None:
    path = tmp_path / "derive.py"
    text = Path(derive.__file__).read_text(encoding="utf-8")
    path.write_text(text, encoding="utf-8")
    calibrate.record({"opt-13b-h800-paper": ("opt-13b-h800", 2.35)}, path)
    new = path.read_text(encoding="utf-8")
    assert '    "opt-13b-h800-paper": ("opt-13b-h800", 2.35),\n' in new
    start = text.index("# BEGIN CALIBRATED")
    assert new[:start] == text[:start]
    end = "# END CALIBRATED"
    assert new[new.index(end) :] == text[text.index(end) :]
    path.write_text("no block here\n", encoding="utf-8")
    with pytest.raises(RuntimeError, match="no CALIBRATED block"):
        calibrate.record({}, path)


def test_run_metrics_runs_the_main_comparison_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibrate, "WINDOW", 20.0)  # ~60 requests at 3 req/s
    base = calibrate.base_profile("opt-13b-h800")
    fast = calibrate.run_metrics(base, ("infercept", 3.0, None))
    slow = calibrate.run_metrics(derive.scaled_profile(base, "slow", 4.0), ("infercept", 3.0, None))
    assert fast["num_requests"] == slow["num_requests"] > 40
    assert slow["ttft_mean"] > fast["ttft_mean"]  # a slower machine: longer TTFT
    assert 0.0 <= slow["goodput"] <= fast["goodput"]
