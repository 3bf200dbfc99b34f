"""`bfcl-multi-turn`: BFCL's `multi_turn_base` conversations as agent sessions.

The 200 conversations of the Berkeley Function Calling Leaderboard's
`multi_turn_base` category (bfcl-eval 2026.3.23), as a correct agent runs them:
a system prompt with the tools' docs and the first user message; in each user
turn one model step per ground-truth call (the call, then the executed result
read back), then the turn's answer; then the next user message. The token counts
come from `augserve/data/bfcl/multi_turn_base.json`, derived once by
`benchmarks/bfcl/derive_multi_turn.py` (every call executed with BFCL's own
simulated APIs from the entry's initial state; counts by the project's
tokenizer-free rule). One session is one request of many segments, as in
`agent-sessions`, so the same agent loop and the same simulator run both.

What BFCL does not give is drawn here, from distributions stated in
`BfclMultiTurnProfile` (assumptions, said so in docs/trace-format.md):

- tool latency: BFCL's APIs are local services (a file system, a trading or
  travel back end): the fast-tool latency of `agent-sessions` (log-normal, median
  0.3 s, sigma 1.0, 0.01-30 s) plus the client's 50 ms round trip;
- the user's time before the next message: `agent-sessions`' think time
  (median 15 s, sigma 0.8, 2-300 s);
- the answer that closes each turn (BFCL scores state and calls, not prose):
  median 40 tokens, sigma 0.6, 8-400.

Calls of one turn run as consecutive steps (most depend on the one before: `cd`
then `mv`). Conversations offering the same API classes share their system
prompt (`TraceRequest.shared_prefix`, `kind` naming the classes and the functions
left out), which is what a prefix cache can reuse across sessions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from augserve.core.request import Segment
from augserve.workload.agent_sessions import AGENT_SESSIONS, _ln
from augserve.workload.profiles import LogNormal
from augserve.workload.trace import Trace, TraceRequest

BFCL_FILE = Path("bfcl") / "multi_turn_base.json"
KIND_PREFIX = "bfcl:"


@dataclass(frozen=True)
class BfclMultiTurnProfile:
    """What the sessions add to BFCL's conversations (module doc)."""

    tool_time: LogNormal = AGENT_SESSIONS.fast_tool_time  # seconds per call
    client_rtt: float = AGENT_SESSIONS.client_rtt  # per tool round trip (s)
    think_time: LogNormal = AGENT_SESSIONS.think_time  # before the next user message (s)
    answer_len: LogNormal = _ln(40.0, 0.6, 8.0, 400.0)  # tokens closing a turn

    def __post_init__(self) -> None:
        if self.client_rtt < 0:
            raise ValueError(f"BfclMultiTurnProfile.client_rtt must be >= 0, got {self.client_rtt}")


BFCL_MULTI_TURN = BfclMultiTurnProfile()


@cache
def load_conversations(path: Path) -> tuple[dict[str, Any], ...]:
    """The derived conversations (`entries` of the data file)."""
    raw = json.loads(path.read_text())
    entries = raw.get("entries") if isinstance(raw, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(
            f"{path}: no `entries` (derive it with benchmarks/bfcl/derive_multi_turn.py)"
        )
    return tuple(entries)


def session(conv: dict[str, Any], p: BfclMultiTurnProfile, rng: np.random.Generator,
            request_id: str) -> TraceRequest:  # fmt: skip
    """One conversation as one request: a segment per call and per turn's answer."""
    turns = conv["turns"]
    segments: list[Segment] = []
    for k, turn in enumerate(turns):
        for step in turn["steps"]:
            call = float(p.tool_time.sample(rng)) + p.client_rtt
            segments.append(Segment(step["call_tokens"], call, step["result_tokens"], "tool"))
        answer = max(1, p.answer_len.sample_int(rng, 1)[0])
        if k + 1 < len(turns):
            think = float(p.think_time.sample(rng))
            segments.append(Segment(answer, think, turns[k + 1]["user_tokens"], "user"))
        else:
            segments.append(Segment(answer))
    system = int(conv["system_tokens"])
    kind = KIND_PREFIX + "+".join(sorted(conv["classes"]))
    if conv.get("excluded"):  # fewer tools offered: another system prompt
        kind += "-" + "-".join(conv["excluded"])
    prompt = system + int(turns[0]["user_tokens"])
    return TraceRequest(request_id, prompt, tuple(segments), None, kind, shared_prefix=system)


def bfcl_multi_turn(n: int, seed: int, data_dir: Path,
                    profile: BfclMultiTurnProfile = BFCL_MULTI_TURN) -> Trace:  # fmt: skip
    """`n` sessions: conversations drawn uniformly (with replacement past 200), each
    with its own latencies from `profile`."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    convs = load_conversations(data_dir / BFCL_FILE)
    rng = np.random.default_rng(seed)
    picks = rng.permutation(len(convs)).tolist()
    while len(picks) < n:
        picks += rng.permutation(len(convs)).tolist()
    reqs = [
        session(convs[j], profile, rng, f"{convs[j]['id']}-{i}") for i, j in enumerate(picks[:n])
    ]
    return Trace(name="bfcl-multi-turn", requests=tuple(reqs))
