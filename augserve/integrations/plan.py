"""What a client tells the plugin about a request, through per-request extra arguments.

vLLM passes `SamplingParams.extra_args` (the OpenAI API's `vllm_xargs`) to the
scheduler untouched; its values may be strings, numbers or lists of them. Keys:

- `augserve_plan`: the request's remaining segments, the current one first, as a
  JSON string `[[output_len, call_time or null, return_len], ...]`. The oracle
  and noisy predictors read it (tests, benchmarks that know their trace).
- `augserve_kind`: the augmentation kind or tool family (a learned predictor's feature).
- `augserve_context`: `preserve` or `discard`, the context policy of a resumable
  streaming session's pauses (hold its KV, or release it to the prefix cache);
  without it the plugin's policy chooses at each pause.
- `augserve_session`: links the turns of one conversation when the engine's own
  `session_id` is not set (offline `LLM.generate`).

A request without a plan is planned by the predictor (`online` by default, learned
from the engine's own finished requests and the gaps between a session's turns);
only the oracle predictors, which read a plan, fall back to one segment of
`max_tokens` without a call (`PolicyBridge.arrive`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from augserve.core.request import ContextPolicy, Segment

PLAN_KEY = "augserve_plan"
KIND_KEY = "augserve_kind"
SESSION_KEY = "augserve_session"
CONTEXT_KEY = "augserve_context"
_HOLDS = {"preserve": ContextPolicy.PRESERVE, "discard": ContextPolicy.DISCARD}


def encode_plan(segments: Sequence[Segment]) -> str:
    """The JSON string a client puts under `augserve_plan`."""
    return json.dumps([[s.output_len, s.call_time, s.return_len] for s in segments])


def decode_plan(raw: Any) -> list[Segment]:
    """Segments from an `augserve_plan` value; ValueError names what is wrong."""
    try:
        rows = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        raise ValueError(f"{PLAN_KEY}: not valid JSON: {exc}") from exc
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{PLAN_KEY}: expected a non-empty list of segments")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, list | tuple) or len(row) != 3:
            raise ValueError(f"{PLAN_KEY}[{i}]: expected [output_len, call_time, return_len]")
        out_len, call, ret = row
        try:
            seg = Segment(int(out_len), None if call is None else float(call), int(ret))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{PLAN_KEY}[{i}]: {exc}") from exc
        out.append(seg)
    return out


def plan_for(extra: Mapping[str, Any] | None) -> list[Segment] | None:
    """The plan the client sent, else None (the predictor plans the request)."""
    if extra and PLAN_KEY in extra:
        return decode_plan(extra[PLAN_KEY])
    return None


def max_tokens_plan(max_tokens: int | None) -> list[Segment]:
    """What an oracle reads when no plan came: one segment of `max_tokens`, no call."""
    return [Segment(max(1, max_tokens or 1))]


def session_of(extra: Mapping[str, Any] | None, session_id: str | None) -> str | None:
    """The engine's session id, else the client's `augserve_session`."""
    if session_id:
        return session_id
    value = (extra or {}).get(SESSION_KEY)
    return str(value) if value not in (None, "") else None


def kind_of(extra: Mapping[str, Any] | None) -> str | None:
    value = (extra or {}).get(KIND_KEY)
    return str(value) if value not in (None, "") else None


def hold_of(extra: Mapping[str, Any] | None) -> ContextPolicy | None:
    """The client's `augserve_context` (None: the policy chooses); ValueError if bad."""
    value = (extra or {}).get(CONTEXT_KEY)
    if value in (None, ""):
        return None
    if value not in _HOLDS:
        raise ValueError(f"{CONTEXT_KEY}: expected preserve or discard, got {value!r}")
    return _HOLDS[value]
