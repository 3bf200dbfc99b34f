"""The `agent-sessions` workload: many turns, growing context, client tools, think time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from augserve.core.config import scheduler_config_for
from augserve.predict.base import OraclePredictor
from augserve.profiles.load import load_profile
from augserve.sim.simulator import simulate
from augserve.workload.agent_sessions import AGENT_SESSIONS, agent_sessions
from augserve.workload.arrivals import poisson_arrivals
from augserve.workload.jsonl import read_jsonl
from augserve.workload.registry import make_workload


def test_sessions_are_many_turns_of_tools_and_people_within_the_context_limit() -> None:
    trace = agent_sessions(400, seed=1)
    assert trace == make_workload("agent-sessions", 400, seed=1)  # seeded, by name
    turns = [len(r.segments) for r in trace]
    assert 9 < float(np.mean(turns)) < 18 and max(turns) > 25
    tools = {s.tool for r in trace for s in r.segments[:-1]}
    assert tools == {"edit", "run", "user"}
    for r in trace:
        assert all(s.has_call for s in r.segments[:-1]) and not r.segments[-1].has_call
        ctx = r.prompt_len + r.output_len + r.returned_len
        assert ctx < AGENT_SESSIONS.max_context
        for s in r.segments[:-1]:
            assert s.call_time is not None and s.call_time >= AGENT_SESSIONS.client_rtt
            if s.tool == "user":
                assert s.call_time >= 2.0  # a person's think time
    runs = [s.call_time for r in trace for s in r.segments if s.tool == "run"]
    edits = [s.call_time for r in trace for s in r.segments if s.tool == "edit"]
    assert np.median(runs) > 5 * np.median(edits)  # executing code is slower than editing


def test_workload_gen_writes_sessions_that_read_back(tmp_path: Path) -> None:
    out = tmp_path / "s.jsonl"
    cmd = [sys.executable, "-m", "augserve", "workload", "gen", "--workload", "agent-sessions",
           "--num", "5", "--seed", "2", "--out", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    back = read_jsonl(out)
    assert [r.segments for r in back] == [r.segments for r in agent_sessions(5, seed=2)]


def test_the_simulator_hits_a_session_s_context_on_each_return() -> None:
    """vllm-apc ends the request at each call: every return re-admits it, and at light
    load its context is still cached; vLLM without the cache recomputes all of it."""
    profile = load_profile("opt-13b-h800")
    trace = agent_sessions(6, seed=3)
    rates = {}
    for policy in ("vllm-apc", "vllm"):
        reqs = trace.to_requests(poisson_arrivals(0.05, n=6, seed=3))
        config = scheduler_config_for(profile, policy)
        res = simulate(reqs, profile, config, window=200, drain=2000,
                       predictor=OraclePredictor(), check=True)  # fmt: skip
        assert len(res.finished) == 6
        rates[policy] = res.stats.prefix_hit_rate
    assert rates["vllm-apc"] > 0.8 and rates["vllm"] == 0.0
