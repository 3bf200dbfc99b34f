"""Plugin options and the per-request plan a client sends (no vLLM here)."""

from __future__ import annotations

import json

import pytest

from augserve.core.request import ContextPolicy, Segment
from augserve.integrations.options import ENV_VAR, PluginOptions, load_options
from augserve.integrations.plan import (
    decode_plan,
    encode_plan,
    hold_of,
    max_tokens_plan,
    plan_for,
    session_of,
)


def test_options_merge_env_under_engine_config() -> None:
    env = {ENV_VAR: json.dumps({"policy": "ssjf", "beta": 1e-4})}
    opts = load_options({"augserve": {"policy": "augserve", "predictor": "noisy:0.2"}}, env)
    assert (opts.policy, opts.beta, opts.predictor) == ("augserve", 1e-4, "noisy:0.2")
    assert load_options(None, {}) == PluginOptions()


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"polcy": "augserve"}, "polcy"),
        ({"policy": "nope"}, "policy"),
        ({"beta_high": 1.5}, "beta_high"),
        ({"beta_low": 0.0}, "beta_low"),
        ({"session_ttl_s": 0}, "session_ttl_s"),
        ({"slo_ttft": 0}, "slo_ttft"),
        ({"slo_reserve": -1}, "slo_reserve"),
        ({"stream_context": "swap"}, "stream_context"),
    ],
)
def test_bad_options_name_the_field(data: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        load_options({"augserve": data}, {})


def test_bad_env_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match=ENV_VAR):
        load_options(None, {ENV_VAR: "{not json"})
    with pytest.raises(ValueError, match="must be an object"):
        load_options({"augserve": [1]}, {})


def test_plan_round_trip_and_defaults() -> None:
    segs = [Segment(10, 1.5, 4), Segment(7)]
    assert decode_plan(encode_plan(segs)) == segs
    assert plan_for({"augserve_plan": encode_plan(segs)}) == segs
    assert plan_for(None) is None and plan_for({}) is None  # the predictor plans it
    assert max_tokens_plan(33) == [Segment(33)] and max_tokens_plan(None) == [Segment(1)]
    assert session_of({"augserve_session": "s1"}, None) == "s1"
    assert session_of({"augserve_session": "s1"}, "engine") == "engine"
    assert session_of(None, None) is None
    assert hold_of({"augserve_context": "discard"}) is ContextPolicy.DISCARD
    assert hold_of({}) is None
    with pytest.raises(ValueError, match="augserve_context"):
        hold_of({"augserve_context": "swap"})


@pytest.mark.parametrize("raw", ["[", "[]", "[[1, 2]]", '[["x", null, 0]]', "[[-1, null, 0]]"])
def test_bad_plans_raise_value_error(raw: str) -> None:
    with pytest.raises(ValueError, match="augserve_plan"):
        decode_plan(raw)
