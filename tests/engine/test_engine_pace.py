"""The served engine's latency model follows its measured pace (`engine/engine_pace.py`):
a profile far off the engine is rescaled after a window of wall-clock steps, the
scheduler repriced; virtual-clock steps and unscalable models are left alone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from augserve.core.latency import BatchShape, LatencyProfile
from augserve.core.pace import PaceConfig
from augserve.engine.background_fit import SwitchableLatency
from augserve.engine.builder import EngineArgs, build_engine
from augserve.engine.engine import LLMEngine
from augserve.engine.engine_pace import EnginePace
from augserve.engine.latency_default import default_latency
from augserve.engine.make_model import make_model
from augserve.engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=40)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("pace") / "m", seed=0)


def _engine(model: Path, scale: float, window: int = 4) -> LLMEngine:
    """An engine priced by the placeholder profile `scale` times too slow or too fast:
    at 1e-6 every step takes far longer than predicted on any machine, at 1e4 far
    shorter, so the clamped pace is known whatever the machine's load."""
    args = EngineArgs(model=str(model), dtype="fp32", num_device_blocks=64, pace_window=window)
    probe = build_engine(replace(args, pace_window=0))
    latency = default_latency(probe.runner, probe.config).scaled(scale)
    return build_engine(args, latency=latency)


def _run(engine: LLMEngine, steps: int, now: float | None = None) -> None:
    if engine.get_request("r") is None:
        engine.add_request("r", list(range(5, 30)), GREEDY, now=now)
    for _ in range(steps):
        engine.step(now)


def test_a_profile_far_too_fast_is_scaled_up_to_the_bound(model: Path) -> None:
    engine = _engine(model, 1e-6)
    assert isinstance(engine.latency, SwitchableLatency) and engine.pace is not None
    base = engine.latency.current
    assert isinstance(base, LatencyProfile)
    tau = engine.scheduler.policy.tau_iter
    _run(engine, 3)  # under one window: nothing read yet
    assert engine.pace.pace == 1.0 and engine.latency.current == base
    _run(engine, 1)
    high = PaceConfig().high
    assert engine.pace.pace == high
    assert engine.latency.current == base.scaled(high)
    assert engine.scheduler.policy.tau_iter == pytest.approx(high * tau)  # repriced


def test_a_profile_far_too_slow_is_scaled_down_to_the_bound(model: Path) -> None:
    engine = _engine(model, 1e4)
    _run(engine, 8)
    assert engine.pace is not None and engine.pace.pace == pytest.approx(PaceConfig().low, abs=1e-3)


def test_virtual_clock_steps_are_not_timed(model: Path) -> None:
    engine = _engine(model, 1e-6)
    _run(engine, 8, now=1.0)
    assert engine.pace is not None and engine.pace.meter.readings == 0


def test_off_by_default_and_a_new_fit_starts_the_pace_again(model: Path) -> None:
    plain = build_engine(EngineArgs(model=str(model), dtype="fp32", num_device_blocks=64))
    assert plain.pace is None and not isinstance(plain.latency, SwitchableLatency)
    engine = _engine(model, 1e-6)
    _run(engine, 4)
    assert engine.pace is not None and engine.pace.pace > 1
    fitted = default_latency(engine.runner, engine.config)
    engine.set_latency(fitted, "fitted")
    assert engine.pace.pace == 1.0 and engine.latency.current == fitted
    assert engine.pace.base == fitted


def test_a_model_that_is_not_a_profile_is_never_rescaled(model: Path) -> None:
    class Flat:  # a LatencyModel with no coefficients to scale
        kv_bytes_per_token = 64

        def iteration_time(self, shape: BatchShape) -> float:
            return 1e-9

        def prefill_time(self, num_tokens: int) -> float:
            return 1e-9

        def decode_iter_time(self) -> float:
            return 1e-9

        def swap_time(self, num_tokens: int) -> float:
            return 1e-9

        def swap_tokens_per_iter(self) -> int:
            return 1

    engine = _engine(model, 1.0)
    engine.add_request("r", list(range(5, 30)), GREEDY, now=0.0)
    out = engine.schedule(0.0)
    assert not out.is_empty
    flat = EnginePace(SwitchableLatency(Flat()), PaceConfig(window=1), 16)
    assert flat.base is None and flat.observe(out, 10.0) is False
    assert isinstance(flat.latency.current, Flat)
    profile = EnginePace(SwitchableLatency(default_latency_of(model)), PaceConfig(window=1), 16)
    assert profile.observe(out, 10.0) is True  # the same step with a profile: repriced


def test_the_window_must_be_positive_for_a_pace(model: Path) -> None:
    with pytest.raises(ValueError, match="window"):
        EnginePace(SwitchableLatency(default_latency_of(model)), PaceConfig(window=0), 16)
    with pytest.raises(ValueError, match="EngineArgs.pace_window"):
        EngineArgs(model=str(model), pace_window=-1)


def default_latency_of(model: Path) -> LatencyProfile:
    engine = build_engine(EngineArgs(model=str(model), dtype="fp32", num_device_blocks=64))
    return default_latency(engine.runner, engine.config)
