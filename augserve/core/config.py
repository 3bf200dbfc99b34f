"""The scheduler's knobs in one frozen, validated config (docs/paper.md sections 2-6)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from augserve.core.latency import LatencyProfile
from augserve.core.request import ContextPolicy


def _positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if value is not None and value <= 0:
            raise ValueError(f"{type(obj).__name__}.{name} must be > 0, got {value}")


@dataclass(frozen=True)
class SchedulerConfig:
    """Every scheduling knob. Times are seconds, memory is blocks of `block_size` tokens.

    policy: ranking policy name, one of `augserve.sched.policies.POLICIES` (the one
        registry; the scheduler checks the name when it builds the policy).
    num_device_blocks / num_host_blocks: KV capacity on the device and the host swap pool.
    max_batch_tokens: T_max, the static token budget (and the dynamic budget's reference).
    dynamic_budget: None takes the policy's default (only `augserve` is dynamic); see
        `augserve.sched.budget.dynamic_token_budget`.
    beta: AugServe's waiting-value weight per millisecond (docs/paper.md section 3).
    beta_low / beta_high: clip range of the dynamic budget, in units of T_max (docs/paper.md
        section 4, revised: [0.5, 1.0], the budget only shrinks below T_max).
    segment_cost: AugServe's space-time cost fixed per segment, set on arrival and at
        each return (Algorithm 1). Default False (docs/paper.md section 3, revised): each
        iteration the cost covers what remains of the segment.
    swap_budget_blocks: blocks moved each way per iteration; None derives it from the
        cost model (tokens swappable in one decode iteration).
    lazy_eviction: keep Swap/Discard requests' KV on device until memory is needed.
    forced_context_policy: use this policy at every call (tests, ablations).
    reevaluate_paused: each iteration, choose again the context policy of every paused
        request still holding device KV, with its remaining predicted call time (as
        WukLab/InferCept does); policies that discard at a call are unaffected.
    scan_on: keep scanning past a request that does not fit (AugServe's packing).
    mars_starvation_limit / mars_quantum: MARS's anti-starvation rule: a waiting request
        skipped that many iterations runs ahead of waiting requests for `mars_quantum`
        iterations (mars-codebase, exps/6B_bench.sh: 100 and 100,000).
    mars_block_triangle / mars_after_returned / mars_swap_rate / mars_boost_running:
        MARS's V2 score (mars-codebase, vllm/core/policy.py) and what each of its
        choices replaces, for the ablation: the chunked memory-time triangle over
        blocks (False: the decode triangle tau_iter * n (n + 1) / 2 over the same
        tokens); "after" counts the returned tokens (False: the interval only); the
        swap term's rate in blocks per second (None: the profile's host link); a boost
        ahead of running requests too (False: of waiting ones only).
    incremental_ranking: keep requests without KV in a persistent per-policy queue
        (a heap; AugServe's aging values in a kinetic heap) instead of keying and sorting
        every runnable request each iteration (False); both offer the batch in exactly
        the same order.
    predictor: `oracle`, `noisy:P`, `learned:DIR` or `online` (learned from the run's
        own calls and segments; the server's default), resolved by the faces.
    slo_reserve: `augserve-slo`'s rescue reserve, in rescues per second of the oldest
        requests that can no longer meet their SLO (`sched/rescue.py`); None takes the
        policy's own (0: none). Other policies ignore it.
    slo_ttft, slo_norm_latency: the SLO `augserve-slo` triages by, in seconds and
        seconds per generated token; None: the paper's (TTFT < 1 s, 10 decode
        iterations at batch 1 of the latency profile). Set them to the SLO the
        deployment is judged by. Other policies ignore them.
    admit_growth: `augserve-slo`'s admission gate (`sched/admission.py`): a request
        without KV is admitted only if its predicted footprint fits beyond this share
        of the KV holders' predicted growth; None takes the policy's own (0: no gate,
        admit whenever memory can be had). Other policies ignore it.
    enable_prefix_caching: automatic prefix caching (`sched/prefix_cache.py`, as vLLM v1):
        full computed blocks stay cached after their request lets them go and a request
        without KV starts after its cached prefix. None takes the policy's default: off
        for the paper's policies as the paper ran them (`augserve`, `vllm`, `infercept`,
        `ssjf`, `ssjf-infercept`, `mars`), on for `augserve-slo`, `vllm-apc` and
        `continuum`; `augserve serve` turns it on for every policy unless told
        `--no-enable-prefix-caching`.
    session_ttl: client sessions (`sched/sessions.py`): a request that ends with
        "tool_calls" stays paused in the scheduler for up to this many seconds, its KV
        kept softly (always reclaimable), and a continuation whose prompt extends its
        context (or that names its session id) resumes it. 0 (the default here; the
        engine's is 600): the request finishes at the call, as before.
    growth_first / max_preemptions: the progress rules every policy runs under
        (`sched/progress.py`, docs/scheduler.md "Progress under overload"): when the
        pool cannot give the KV holders the blocks they need this iteration, they are
        offered the batch before any request without KV is admitted (vLLM's rule); a
        request preempted `max_preemptions` times in a segment is protected: offered
        first and preempted only by requests protected before it, so it finishes
        (None: never protected; policies whose preemption order is fixed do not need
        it and keep their reference behaviour, see `PolicyDefaults.protection`).
    newest_first: where the policy's preemption order moves (`augserve`,
        `augserve-slo`), while the rules are engaged a holder takes KV only from
        holders that got theirs after it, the last first (vLLM's order), instead of
        protection (rule 3, off by default: its measured effect is mixed,
        docs/scheduler.md "Progress under overload").
    recompute_budget: the rules above engage only while preemption throws away more
        computed tokens than this many per token of the segments that ended, over the
        last few hundred iterations (`progress.ThrashMeter`); below it every policy
        packs as its own rules say. None: the rules are always on.
    """

    policy: str = "augserve"
    block_size: int = 16
    num_device_blocks: int = 4096
    num_host_blocks: int = 0
    max_batch_tokens: int = 2048
    max_num_seqs: int = 256
    dynamic_budget: bool | None = None
    beta: float = 5e-5
    beta_low: float = 0.5
    beta_high: float = 1.0
    segment_cost: bool = False
    swap_budget_blocks: int | None = None
    lazy_eviction: bool = True
    forced_context_policy: ContextPolicy | None = None
    reevaluate_paused: bool = True
    scan_on: bool = True
    mars_starvation_limit: int = 100
    mars_quantum: int = 100_000
    mars_block_triangle: bool = True
    mars_after_returned: bool = True
    mars_swap_rate: float | None = 2.0
    mars_boost_running: bool = False
    incremental_ranking: bool = True
    predictor: str = "oracle"
    slo_reserve: float | None = None
    slo_ttft: float | None = None
    slo_norm_latency: float | None = None
    admit_growth: float | None = None
    enable_prefix_caching: bool | None = None
    session_ttl: float = 0.0
    growth_first: bool = True
    max_preemptions: int | None = 2
    newest_first: bool = False
    recompute_budget: float | None = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.policy, str) or not self.policy:
            raise ValueError(f"SchedulerConfig.policy must be a policy name, got {self.policy!r}")
        _positive(self, "block_size", "num_device_blocks", "max_batch_tokens", "max_num_seqs")
        _positive(self, "swap_budget_blocks", "mars_starvation_limit", "mars_quantum")
        _positive(self, "mars_swap_rate", "slo_ttft", "slo_norm_latency")
        if self.num_host_blocks < 0:
            raise ValueError(
                f"SchedulerConfig.num_host_blocks must be >= 0, got {self.num_host_blocks}"
            )
        _positive(self, "max_preemptions")
        if self.recompute_budget is not None and not self.recompute_budget >= 0:
            raise ValueError(
                f"SchedulerConfig.recompute_budget must be >= 0, got {self.recompute_budget}"
            )
        if not self.session_ttl >= 0:
            raise ValueError(f"SchedulerConfig.session_ttl must be >= 0, got {self.session_ttl}")
        if self.beta < 0:
            raise ValueError(f"SchedulerConfig.beta must be >= 0, got {self.beta}")
        if not 0 < self.beta_low <= 1:
            raise ValueError(f"SchedulerConfig.beta_low must be in (0, 1], got {self.beta_low}")
        if self.beta_high < 1:
            raise ValueError(f"SchedulerConfig.beta_high must be >= 1, got {self.beta_high}")
        if self.slo_reserve is not None and not self.slo_reserve >= 0:
            raise ValueError(f"SchedulerConfig.slo_reserve must be >= 0, got {self.slo_reserve}")
        if self.admit_growth is not None and not self.admit_growth >= 0:
            raise ValueError(f"SchedulerConfig.admit_growth must be >= 0, got {self.admit_growth}")
        if not self.predictor or not isinstance(self.predictor, str):
            raise ValueError(
                f"SchedulerConfig.predictor must be a spec string, got {self.predictor!r}"
            )

    def with_(self, **changes: Any) -> SchedulerConfig:
        return replace(self, **changes)


def scheduler_config_for(
    profile: LatencyProfile, policy: str, block_size: int = 16, **overrides: Any
) -> SchedulerConfig:
    """A `SchedulerConfig` whose capacities and budgets come from `profile`.

    `overrides` are further `SchedulerConfig` fields; None values are ignored.
    """
    base = SchedulerConfig(
        policy=policy,
        block_size=block_size,
        num_device_blocks=profile.device_blocks(block_size),
        num_host_blocks=profile.host_blocks(block_size),
        max_batch_tokens=profile.max_batch_tokens,
        max_num_seqs=profile.max_num_seqs,
    )
    return base.with_(**{k: v for k, v in overrides.items() if v is not None})
