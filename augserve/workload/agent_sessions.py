"""`agent-sessions`: multi-turn agent sessions whose tools run on the client.

A session is one request of many segments: the model writes a turn (reasoning
and a tool call), the client runs the tool and sends the result back, the
context grows by the turn and the result, and the next turn follows; now and
then the pause is a person instead (think time, then a short user message).
The simulator sees exactly what a server sees from a client that resends the
whole conversation each turn: the context of turn k + 1 is that of turn k plus
its output and the returned tokens. `vllm-apc` ends the request at each call
and re-admits it on return (its prefix may hit the cache), `continuum` pins
its KV for a TTL, our policies keep it by value. Job completion time is the
session's arrival-to-finish latency.

Every distribution is an assumption where docs/trace-format.md says so (the
numbers below, with the reasoning for each).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from augserve.core.request import Segment
from augserve.workload.profiles import LogNormal
from augserve.workload.trace import Trace, TraceRequest

KIND_AGENT = "agent"


def _ln(median: float, sigma: float, lo: float, hi: float) -> LogNormal:
    return LogNormal(float(np.log(median)), sigma, lo, hi)


@dataclass(frozen=True)
class AgentSessionProfile:
    """The distributions of one kind of agent session (docs/trace-format.md)."""

    turns: LogNormal = _ln(12.0, 0.6, 2.0, 60.0)  # model turns per session
    prompt_len: LogNormal = _ln(2500.0, 0.5, 600.0, 12000.0)  # system + tools + task
    output_len: LogNormal = _ln(150.0, 0.8, 10.0, 1500.0)  # tokens per model turn
    result_len: LogNormal = _ln(400.0, 1.0, 10.0, 6000.0)  # tool result tokens
    fast_tool_time: LogNormal = _ln(0.3, 1.0, 0.01, 30.0)  # read / edit / search (s)
    run_tool_time: LogNormal = _ln(6.0, 1.0, 0.2, 300.0)  # tests, builds, scripts (s)
    run_share: float = 0.3  # share of tool calls that execute code
    client_rtt: float = 0.05  # network and client overhead per round trip (s)
    user_share: float = 0.1  # share of pauses that wait on a person
    think_time: LogNormal = _ln(15.0, 0.8, 2.0, 300.0)  # a person's think time (s)
    user_len: LogNormal = _ln(60.0, 0.8, 5.0, 800.0)  # a user message's tokens
    max_context: int = 32768  # a session stops before its context exceeds this

    def __post_init__(self) -> None:
        for name in ("run_share", "user_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"AgentSessionProfile.{name} must be in [0, 1]")
        if self.client_rtt < 0:
            raise ValueError(f"AgentSessionProfile.client_rtt must be >= 0, got {self.client_rtt}")
        if self.max_context < 2:
            raise ValueError(
                f"AgentSessionProfile.max_context must be >= 2, got {self.max_context}"
            )


AGENT_SESSIONS = AgentSessionProfile()


def _pause(p: AgentSessionProfile, rng: np.random.Generator) -> tuple[float, int, str]:
    """One pause between turns: (seconds, tokens returned, tool name)."""
    if rng.random() < p.user_share:
        return float(p.think_time.sample(rng)), p.user_len.sample_int(rng, 1)[0], "user"
    if rng.random() < p.run_share:
        t, tool = float(p.run_tool_time.sample(rng)), "run"
    else:
        t, tool = float(p.fast_tool_time.sample(rng)), "edit"
    return t + p.client_rtt, p.result_len.sample_int(rng, 1)[0], tool


def agent_session(
    p: AgentSessionProfile, rng: np.random.Generator, request_id: str
) -> TraceRequest:
    """One session: turns until its planned count or its context limit."""
    prompt_len = max(1, int(round(float(p.prompt_len.sample(rng)))))
    turns = max(1, int(round(float(p.turns.sample(rng)))))
    ctx = prompt_len
    segments: list[Segment] = []
    for k in range(turns):
        out = max(1, p.output_len.sample_int(rng, 1)[0])
        if k == turns - 1 or ctx + out >= p.max_context:
            segments.append(Segment(max(1, min(out, p.max_context - ctx - 1))))
            break
        call_time, returned, tool = _pause(p, rng)
        returned = max(0, min(returned, p.max_context - ctx - out - 2))
        segments.append(Segment(out, call_time, returned, tool))
        ctx += out + returned
    return TraceRequest(request_id, prompt_len, tuple(segments), None, KIND_AGENT)


def agent_sessions(n: int, seed: int = 0, profile: AgentSessionProfile = AGENT_SESSIONS) -> Trace:
    """`n` sessions drawn from `profile`."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    reqs = [agent_session(profile, rng, f"agent-sessions-{i}") for i in range(n)]
    return Trace(name="agent-sessions", requests=tuple(reqs))
