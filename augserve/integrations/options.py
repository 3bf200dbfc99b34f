"""The scheduler plugin's options: one frozen, validated dataclass.

They reach the engine process through the outside engine's own config (vLLM:
`--additional-config '{"augserve": {...}}'`) or, where that is not available,
the environment variable `AUGSERVE_VLLM_OPTIONS` (a JSON object); keys of the
config win over the environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from augserve.sched.policies import POLICIES

ENV_VAR = "AUGSERVE_VLLM_OPTIONS"
CONFIG_KEY = "augserve"


@dataclass(frozen=True)
class PluginOptions:
    """How the plugin ranks and budgets.

    policy: any of our ranking policies (`augserve.sched.policies.POLICIES`,
        `augserve-slo` included).
    profile: latency profile the cost terms are priced with: a shipped name
        (`augserve.profiles.list_profiles()`) or a JSON file (`augserve profile`).
    predictor: `online` (learned from the engine's own requests, `predictions.py`),
        `oracle`, `noisy:P` (read the plan a client sends, else take `max_tokens`
        as the output length, see `plan.py`) or `learned:DIR`.
    seed: the noisy predictor's seed.
    beta: AugServe's waiting-value weight per millisecond.
    beta_low / beta_high: clip range of the dynamic budget in units of the engine's
        static budget; beta_high cannot exceed 1 (the engine's batch never grows).
    dynamic_budget: None takes the policy's default (augserve: dynamic).
    slo_ttft / slo_norm_latency / slo_reserve: `augserve-slo`'s SLO (seconds, seconds
        per token) and rescue reserve (per second); None takes the policy's defaults
        (the profile's: TTFT 1 s, 10 decode iterations per token; 0.05/s).
    admit_growth: `augserve-slo`'s admission gate (`overload.py`): the share of the
        running requests' predicted growth kept free when a waiting request is let
        through; None takes the policy's own (0.2), 0 turns the gate off.
    stream_context: at a resumable streaming session's pause, `choose` (our policy's
        choice: Preserve holds the KV, Discard releases it to the prefix cache) or
        `preserve` (always hold it); a request's `augserve_context` overrides it.
    client_sessions: at the end of a session's turn (`session_id`) followed by a
        predicted call, `choose` (our policy's choice: Preserve holds the turn's KV
        blocks until its next turn is scheduled, `holds.py`; Discard frees them into
        vLLM's prefix cache) or `discard` (always free them: vLLM's own behaviour).
    session_ttl_s / max_sessions: how long and how many ended turns are remembered
        so that a resubmitted context is recognized as a call's return (and how long,
        at most, a held turn waits for its next turn to be scheduled).
    decision_log: keep the last N steps' decisions (budget, order, scheduled ids)
        for tests and diagnostics; 0 keeps none.
    """

    policy: str = "augserve"
    profile: str = "opt-13b-h800"
    predictor: str = "online"
    seed: int = 0
    beta: float = 5e-5
    beta_low: float = 0.5
    beta_high: float = 1.0
    dynamic_budget: bool | None = None
    slo_ttft: float | None = None
    slo_norm_latency: float | None = None
    slo_reserve: float | None = None
    admit_growth: float | None = None
    stream_context: str = "choose"
    client_sessions: str = "choose"
    session_ttl_s: float = 600.0
    max_sessions: int = 100_000
    decision_log: int = 0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(
                f"PluginOptions.policy must be one of {', '.join(POLICIES)}, got {self.policy!r}"
            )
        if not self.profile:
            raise ValueError("PluginOptions.profile must name a profile or a JSON file")
        if not self.predictor:
            raise ValueError("PluginOptions.predictor must be a predictor spec")
        if self.beta < 0:
            raise ValueError(f"PluginOptions.beta must be >= 0, got {self.beta}")
        if not 0 < self.beta_low <= self.beta_high:
            raise ValueError(
                f"PluginOptions.beta_low must be in (0, beta_high], got {self.beta_low}"
            )
        if self.beta_high > 1:
            raise ValueError(
                f"PluginOptions.beta_high must be <= 1 (the engine's batch size is its "
                f"max_num_batched_tokens), got {self.beta_high}"
            )
        for name in ("slo_ttft", "slo_norm_latency"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"PluginOptions.{name} must be > 0, got {value}")
        if self.slo_reserve is not None and not self.slo_reserve >= 0:
            raise ValueError(f"PluginOptions.slo_reserve must be >= 0, got {self.slo_reserve}")
        if self.admit_growth is not None and not self.admit_growth >= 0:
            raise ValueError(f"PluginOptions.admit_growth must be >= 0, got {self.admit_growth}")
        if self.stream_context not in ("choose", "preserve"):
            raise ValueError(
                f"PluginOptions.stream_context must be choose or preserve, got "
                f"{self.stream_context!r}"
            )
        if self.client_sessions not in ("choose", "discard"):
            raise ValueError(
                f"PluginOptions.client_sessions must be choose or discard, got "
                f"{self.client_sessions!r}"
            )
        if self.session_ttl_s <= 0:
            raise ValueError(f"PluginOptions.session_ttl_s must be > 0, got {self.session_ttl_s}")
        if self.max_sessions < 0 or self.decision_log < 0:
            raise ValueError("PluginOptions.max_sessions and decision_log must be >= 0")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str) -> PluginOptions:
        """Options from a dict; unknown keys and bad values raise ValueError naming `source`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"{source}: unknown augserve option(s) {unknown}; known: {sorted(known)}"
            )
        try:
            return cls(**dict(data))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{source}: {exc}") from exc


def load_options(
    engine_config: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None
) -> PluginOptions:
    """Merge `$AUGSERVE_VLLM_OPTIONS` (JSON) under `engine_config["augserve"]`."""
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = {}
    raw = env.get(ENV_VAR)
    if raw:
        try:
            from_env = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"${ENV_VAR}: not valid JSON: {exc}") from exc
        if not isinstance(from_env, dict):
            raise ValueError(f"${ENV_VAR}: expected a JSON object")
        merged.update(from_env)
    section = (engine_config or {}).get(CONFIG_KEY) or {}
    if not isinstance(section, Mapping):
        raise ValueError(f"additional_config[{CONFIG_KEY!r}] must be an object")
    merged.update(section)
    return PluginOptions.from_mapping(merged, source=f"augserve options ({ENV_VAR} / config)")
