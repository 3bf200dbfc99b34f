"""The engine's pace (`core/pace.py`) and the scaled profile it prices with."""

from __future__ import annotations

import pytest

from augserve.core.latency import BatchShape, LatencyProfile
from augserve.core.pace import PaceConfig, PaceMeter

PROFILE = LatencyProfile(
    name="p", c0=1e-3, c_prefill=1e-5, c_attn=1e-9, c_decode=1e-4, c_ctx=1e-7, kv_bytes=64,
    device_kv_bytes=64 * 4096, host_kv_bytes=64 * 1024, swap_bandwidth=1e9,
    max_batch_tokens=512, max_num_seqs=64,
)  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value"),
    [("window", -1), ("smoothing", 0.0), ("smoothing", 1.5), ("tolerance", -0.1),
     ("low", 0.0), ("low", 1.5), ("high", 0.9)],
)  # fmt: skip
def test_a_bad_config_names_its_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"PaceConfig.{field}"):
        PaceConfig(**{field: value})


def test_the_pace_is_read_once_a_window_and_weighs_long_iterations_more() -> None:
    meter = PaceMeter(PaceConfig(window=3, smoothing=1.0, tolerance=0.0))
    # 1 ms predicted and 1 ms taken, twice, then one 10 ms iteration that took 40
    assert meter.observe(1e-3, 1e-3) is None and meter.observe(1e-3, 1e-3) is None
    pace = meter.observe(10e-3, 40e-3)
    assert pace == pytest.approx(42 / 12)  # sums, not the mean of ratios (2.0)
    assert meter.readings == 1 and meter.pace == pace


def test_the_pace_moves_only_past_the_tolerance_and_stays_within_its_bounds() -> None:
    meter = PaceMeter(PaceConfig(window=1, smoothing=1.0, tolerance=0.1, low=0.5, high=4.0))
    assert meter.observe(1.0, 1.05) is None  # 5%: within the tolerance
    assert meter.pace == 1.0 and meter.estimate == pytest.approx(1.05)
    assert meter.observe(1.0, 1.6) == pytest.approx(1.6)
    assert meter.observe(1.0, 100.0) == 4.0  # clamped
    assert meter.observe(1.0, 0.001) == 0.5
    meter.reset()
    assert (meter.pace, meter.estimate, meter.readings) == (1.0, 1.0, 0)


def test_smoothing_follows_the_readings_part_way() -> None:
    meter = PaceMeter(PaceConfig(window=1, smoothing=0.5, tolerance=0.0))
    assert meter.observe(1.0, 3.0) == pytest.approx(2.0)
    assert meter.observe(1.0, 3.0) == pytest.approx(2.5)


def test_idle_iterations_and_a_clock_going_back_are_not_read() -> None:
    meter = PaceMeter(PaceConfig(window=1))
    assert meter.observe(0.0, 0.5) is None and meter.observe(1.0, -0.1) is None
    assert meter.readings == 0


def test_a_scaled_profile_is_that_much_slower_at_every_batch_with_the_same_memory() -> None:
    slow = PROFILE.scaled(1.6)
    shape = BatchShape(prefill_tokens=100, prefill_attn=5050, decode_reqs=8, decode_context=4000)
    assert slow.iteration_time(shape) == pytest.approx(1.6 * PROFILE.iteration_time(shape))
    assert slow.decode_iter_time() == pytest.approx(1.6 * PROFILE.decode_iter_time())
    assert slow.swap_time(1000) == PROFILE.swap_time(1000)  # the host link is not the forward
    assert slow.device_blocks(16) == PROFILE.device_blocks(16)
    with pytest.raises(ValueError, match="pace"):
        PROFILE.scaled(0.0)
    with pytest.raises(ValueError, match="pace"):
        PROFILE.scaled(float("nan"))
