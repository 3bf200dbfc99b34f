"""Scripted tool plans on `/v1/completions` (`augserve_segments`), for benchmarks.

A client replaying a tool-augmented trace sends each request once, with its plan:

    {"prompt": [...], "augserve_segments": [
        {"output_len": 12, "call_time": 0.8, "return_len": 30},
        {"output_len": 5}]}

The engine generates exactly each segment's `output_len` tokens (EOS is ignored),
then pauses the request in the scheduler for a call of `call_time` seconds (an
`asyncio.sleep`: its KV is preserved, swapped or discarded as the policy decides,
as with a real tool), appends `return_len` filler tokens and goes on. Only the
last segment ends without a call; with `"client_tool": NAME` it ends as if the
model had called client-side tool NAME (`finish_reason: "tool_calls"`, the KV kept
as a paused client session that the client's next request, naming the session or
extending the context, continues), for agent-loop benchmarks on models that do not
write calls. Off unless the server runs with `--allow-scripted-tools`, which
`install`s `plan_scripted` as the pipeline's plan hook (`server/pipeline.py`): a
plan lets a client hold a request (and its KV) for as long as its calls say, and
without the flag nothing of this module is on the request path.

The finished choice carries `augserve_timing` (seconds after the request reached
the engine): `first_scheduled`, `first_token`, `finish`, `calls` (start, end,
returned tokens, context policy of each), `call_time` (their sum),
`generated_tokens`, `returned_tokens`, `exec_time` and `norm_latency` =
(finish - call_time) / generated tokens, as `augserve.core.metrics` defines it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from augserve.core.prediction import client_key
from augserve.core.request import Request, Segment
from augserve.server.errors import APIError
from augserve.server.generation import Choice, ChoiceState
from augserve.server.pipeline import Inputs, Plan, PromptPlan, echo_text
from augserve.server.protocol import CompletionRequest, ScriptedSegment
from augserve.server.state import ServerState, sampling_params

if TYPE_CHECKING:
    from augserve.engine.outputs import RequestOutput

MAX_SEGMENTS = 256
MAX_CALL_TIME = 600.0  # seconds one scripted call may last
PARAM = "augserve_segments"


def install(state: ServerState) -> None:
    """Serve scripted plans on this server (`--allow-scripted-tools`)."""
    state.plan_hook = plan_scripted


def plan_scripted(
    state: ServerState, req: Any, spec: Inputs, encoded: list[list[int]]
) -> Plan | None:
    """The pipeline's plan hook: a completions request with a plan runs it (one choice
    that ignores EOS); any other request is planned as usual (None)."""
    segments = scripted_plan(state, req) if isinstance(req, CompletionRequest) else None
    if segments is None:
        return None
    fmt = req.response_format
    if fmt is not None and fmt.type != "text":
        raise APIError(
            400, "response_format does not apply to scripted plans", param="response_format"
        )
    check_plan_fits(state, len(encoded[0]), segments)
    params = replace(sampling_params(req, sum(s.output_len for s in segments), 0), ignore_eos=True)
    choice = Choice(ScriptedChoiceState(0), params, segments=segments, cache_salt=req.cache_salt)
    return Plan([PromptPlan(encoded[0], [choice], echo_text(state, spec, 0, encoded[0]))])


@dataclass
class ScriptedChoiceState(ChoiceState):
    """A scripted choice: no parser, no stops, its content the generated text (filler
    results are not shown); finished, it carries `augserve_timing`."""

    timing: dict[str, Any] | None = None

    def visible_delta(self, out: RequestOutput) -> str:
        return out.delta_text

    def on_finish(self, out: RequestOutput) -> None:
        if out.request is not None:
            self.timing = timing(out.request)

    def extra_fields(self) -> dict[str, Any]:
        return {} if self.timing is None else {"augserve_timing": self.timing}


def scripted_plan(state: ServerState, req: CompletionRequest) -> list[Segment] | None:
    """The request's plan as engine segments (None without one); 400 on a bad plan.
    The context-length check needs the prompt: `check_plan_fits`."""
    plan = req.augserve_segments
    if plan is None:
        return None
    if len(plan) > MAX_SEGMENTS:
        raise _bad(f"at most {MAX_SEGMENTS} segments, got {len(plan)}")
    if req.n != 1:
        raise APIError(400, f"a scripted plan needs n=1, got n={req.n}", param="n")
    if len(req.prompts()) != 1:
        raise APIError(400, "a scripted plan needs exactly one prompt", param="prompt")
    if req.stop_list():
        raise APIError(400, "a scripted plan generates exactly its tokens: no 'stop'", param="stop")
    segments = [_segment(i, s, len(plan)) for i, s in enumerate(plan)]
    total = sum(s.output_len for s in segments)
    if req.max_tokens is not None and req.max_tokens != total:
        msg = f"max_tokens ({req.max_tokens}) must be absent or the plan's total output_len"
        raise APIError(400, f"{msg} ({total})", param="max_tokens")
    cap = state.limits.max_tokens
    if cap is not None and total > cap:
        raise _bad(f"the plan generates {total} tokens; this server allows at most {cap}")
    return segments


def _segment(i: int, s: ScriptedSegment, count: int) -> Segment:
    where = f"{PARAM}[{i}]"
    last = i == count - 1
    if s.call_time is None and not last:
        raise _bad(f"{where} has no call_time: only the last segment ends without a call")
    if s.call_time is not None and last:
        raise _bad(f"{where}: the last segment must not make a call")
    if s.call_time is not None and s.call_time > MAX_CALL_TIME:
        raise _bad(f"{where}.call_time must be <= {MAX_CALL_TIME:g} s, got {s.call_time:g}")
    if s.call_time is None and s.return_len:
        raise _bad(f"{where}.return_len needs a call_time")
    if s.client_tool is not None:
        if not last:
            raise _bad(f"{where}.client_tool: only the last segment ends with a client call")
        return Segment(s.output_len, None, 0, client_key(s.client_tool))
    return Segment(s.output_len, s.call_time, s.return_len, "scripted")


def _bad(message: str) -> APIError:
    return APIError(400, message, param=PARAM)


def check_plan_fits(state: ServerState, prompt_len: int, segments: list[Segment]) -> None:
    """The whole context (prompt, generated and returned tokens) must fit below the
    model's length, or the engine would cut the plan short."""
    total = prompt_len + sum(s.output_len + s.return_len for s in segments)
    if total >= state.max_model_len:
        raise APIError(
            400,
            f"this model's maximum context length is {state.max_model_len} tokens; the "
            f"plan reaches {total} ({prompt_len} in the prompt, the rest generated and returned)",
            param=PARAM,
            code="context_length_exceeded",
        )


def timing(req: Request) -> dict[str, Any]:
    """The request's timings, seconds after it reached the engine (see the module doc)."""

    def rel(t: float | None) -> float | None:
        return None if t is None else round(t - req.arrival_time, 6)

    calls = [
        {
            "start": rel(c.start),
            "end": rel(c.end),
            "returned_tokens": c.returned_tokens,
            "policy": c.policy.value if c.policy is not None else None,
        }
        for c in req.calls
    ]
    finish = rel(req.finish_time)
    call_time = round(req.call_time_total, 6)
    gen = req.num_generated_tokens
    return {
        "first_scheduled": rel(req.first_scheduled_time),
        "first_token": rel(req.first_token_time),
        "finish": finish,
        "calls": calls,
        "call_time": call_time,
        "generated_tokens": gen,
        "returned_tokens": req.num_returned_tokens,
        "exec_time": round(req.exec_time, 6),
        "norm_latency": None if finish is None else (finish - call_time) / max(1, gen),
    }
