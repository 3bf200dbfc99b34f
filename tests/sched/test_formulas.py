"""Every formula of docs/paper.md sections 2-4 against a hand-computed example."""

import pytest

from augserve.core.config import SchedulerConfig
from augserve.core.request import CallRecord, ContextPolicy, Request, Segment
from augserve.sched.budget import dynamic_token_budget
from augserve.sched.context_policy import choose_context_policy, waste
from augserve.sched.policies.augserve import AugServePolicy
from augserve.sched.scheduler import Scheduler
from augserve.sched.spacetime import (
    call_cost,
    decode_cost,
    prefill_cost,
    resume_cost,
    return_cost,
    scheduling_value,
    value_density,
)

P, D, S = ContextPolicy.PRESERVE, ContextPolicy.DISCARD, ContextPolicy.SWAP


def test_profile_primitives(profile):
    assert profile.prefill_time(100) == pytest.approx(0.11)
    assert profile.decode_iter_time() == pytest.approx(0.01)
    assert profile.swap_time(100) == pytest.approx(0.1)
    assert profile.swap_tokens_per_iter() == 10


def test_waste_each_policy(profile):
    # L~ = 100 tokens, tau_call = 2 s, 500 tokens of other running requests.
    assert waste(P, 100, 2.0, 500, profile) == pytest.approx(200.0)  # 2 * 100
    assert waste(D, 100, 2.0, 500, profile) == pytest.approx(66.0)  # 0.11*100 + 0.11*500
    assert waste(S, 100, 2.0, 500, profile) == pytest.approx(2.0)  # 2 * 0.1 * 10


def test_choose_context_policy_is_argmin(profile):
    assert choose_context_policy(100, 2.0, 500, profile, allow_swap=True) is S
    assert choose_context_policy(100, 2.0, 500, profile, allow_swap=False) is D
    assert choose_context_policy(100, 0.1, 500, profile, allow_swap=False) is P  # 10 < 66


def test_space_time_terms(profile):
    assert prefill_cost(100, profile) == pytest.approx(11.0)  # 100 * 0.11
    assert decode_cost(100, 10, 0.01) == pytest.approx(10.55)  # 0.01 * (10*100 + 55)
    assert call_cost(P, 110, 2.0, profile) == pytest.approx(220.0)
    assert call_cost(S, 110, 2.0, profile) == pytest.approx(12.1)  # 110 * 0.11
    assert call_cost(D, 110, 2.0, profile) == 0.0
    assert return_cost(110, 20, profile) == pytest.approx(3.9)  # 130 * 0.03
    assert resume_cost(D, 110, profile) == pytest.approx(13.2)  # 110 * 0.12
    assert resume_cost(S, 110, profile) == pytest.approx(12.1)
    assert resume_cost(P, 110, profile) == 0.0


class _Load:
    def __init__(self, tokens: int = 0) -> None:
        self.tokens = tokens

    def running_tokens(self) -> int:
        return self.tokens


def _augserve(profile, **kw):
    cfg = SchedulerConfig(policy="augserve", num_host_blocks=64, **kw)
    return AugServePolicy(cfg, profile, _Load())


def test_pre_invocation_estimate(profile):
    pol = _augserve(profile)
    req = Request("r", 0.0, prompt_len=100, segments=[Segment(10, 2.0, 20), Segment(5)])
    req.pred_output_len, req.pred_call_time = 10.0, 2.0
    # planned policy at L~ = 110: P 220, D 0.12*110 = 13.2, S 2*0.11*10 = 2.2 -> Swap
    assert pol.planned_policy(req, 110) is S
    # C = C_prefill(100) + C_decode(100, 10) + C_call(S, 110) = 11 + 10.55 + 12.1
    assert pol.arrival_cost(req) == pytest.approx(33.65)


def test_post_invocation_refinement_uses_realized_return_and_applied_policy(profile):
    pol = _augserve(profile)
    req = Request("r", 0.0, prompt_len=100, segments=[Segment(10, 2.0, 20), Segment(5)])
    req.num_tokens = 130  # 100 prompt + 10 generated + 20 returned
    req.calls.append(CallRecord(start=1.0, end=3.0, returned_tokens=20))
    req.pred_output_len, req.pred_call_time = 5.0, None
    # feedback = C_return(110, 20) + Resume(D, 110) = 3.9 + 13.2; tail = C_decode(130, 5)
    expected = 3.9 + 13.2 + 0.01 * (5 * 130 + 15)
    assert pol.feedback_cost(req, D) == pytest.approx(expected)
    # the applied policy matters: preserved context resumes for free
    assert pol.feedback_cost(req, P) == pytest.approx(3.9 + 6.65)


def test_value_density_with_beta(profile):
    pol = _augserve(profile, beta=5e-5, segment_cost=True)  # C fixed: set it by hand
    a = Request("a", 0.0, prompt_len=100)
    b = Request("b", 0.0, prompt_len=100)
    pol._seg.update(a=33.65, b=30.0)
    a.last_scheduled_time, b.last_scheduled_time = 0.0, 2.0
    order = pol.order([b, a], now=2.0)
    # a waited 2000 ms: V = 1 + 5e-5 * 2000 = 1.1; theta = 1.1 / 33.65 = 0.03269 > 1 / 30
    assert scheduling_value(2.0, 5e-5) == pytest.approx(1.1)
    assert value_density(1.1, 33.65) == pytest.approx(1.1 / 33.65)
    assert pol.density(a, 2.0) == pytest.approx(1.1 / 33.65)
    assert pol.density(b, 2.0) == pytest.approx(1.0 / 30.0)
    assert order == [b, a]
    b.last_scheduled_time = 20.0  # b keeps running; a waited 20 s: V = 2.0
    order = pol.order([b, a], now=20.0)
    assert pol.density(a, 20.0) == pytest.approx(2.0 / 33.65)  # 0.0594 > b's 1 / 30
    assert order[0] is a


@pytest.mark.parametrize(
    ("free", "reclaimable", "expected"),
    [(10, 5, 240), (2, 0, 100), (100, 0, 400), (0, 30, 400), (6, 1, 112)],
)
def test_dynamic_budget_with_clipping(free, reclaimable, expected):
    # (free + reclaimable) * 16 tokens, clipped to [0.5, 2.0] x T_max = [100, 400]
    assert dynamic_token_budget(free, reclaimable, 16, 200, 0.5, 2.0) == expected


def test_config_rejects_bad_values_naming_the_field():
    for kw, field in [
        ({"policy": ""}, "policy"),
        ({"block_size": 0}, "block_size"),
        ({"num_host_blocks": -1}, "num_host_blocks"),
        ({"beta": -1.0}, "beta"),
        ({"beta_low": 0.0}, "beta_low"),
        ({"beta_high": 0.5}, "beta_high"),
        ({"max_batch_tokens": -5}, "max_batch_tokens"),
        ({"swap_budget_blocks": 0}, "swap_budget_blocks"),
        ({"predictor": ""}, "predictor"),
    ]:
        with pytest.raises(ValueError, match=field):
            SchedulerConfig(**kw)


def test_unknown_policy_is_rejected_naming_the_field_and_the_choices(profile):
    with pytest.raises(ValueError, match=r"SchedulerConfig.policy must be one of vllm, .*'fifo'"):
        Scheduler(SchedulerConfig(policy="fifo"), profile)
