"""Scripted tool plans on `/v1/completions` (`augserve_segments`, for benchmarks) and
vLLM's `return_token_ids` extension, against a live server: bad plans are a 400 that
names the field, plans are off unless the server allows them, and a plan generates
exactly its tokens, pauses for each call for its duration and reports timings that
add up."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import MODEL, LiveServer, start_server

PROMPT = [5, 6, 7, 8, 9, 10, 11, 12]


@pytest.fixture(scope="module")
def scripted(chat_model_dir: Path) -> Iterator[LiveServer]:
    srv = start_server(chat_model_dir, allow_scripted=True, policy="augserve")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def plain(chat_model_dir: Path) -> Iterator[LiveServer]:
    srv = start_server(chat_model_dir)
    yield srv
    srv.stop()


def post(srv: LiveServer, **body: Any) -> httpx.Response:
    body = {"model": MODEL, "prompt": PROMPT, **body}
    return httpx.post(srv.url + "/v1/completions", json=body, timeout=60)


def error_of(resp: httpx.Response) -> tuple[str | None, str]:
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    return err["param"], err["message"]


def test_plans_are_off_by_default(plain: LiveServer) -> None:
    param, msg = error_of(post(plain, augserve_segments=[{"output_len": 3}]))
    assert param == "augserve_segments" and "--allow-scripted-tools" in msg


def test_plans_are_an_extension_off_the_live_path(plain: LiveServer, scripted: LiveServer) -> None:
    """Only `--allow-scripted-tools` installs the plan hook (`server/pipeline.py`); the
    request path's modules import nothing of `scripted.py`."""
    from augserve.server import generation, pipeline
    from augserve.server.scripted import plan_scripted

    assert plain.state.plan_hook is None and scripted.state.plan_hook is plan_scripted
    for module in (generation, pipeline):  # nothing of scripted.py imported there
        origins = {getattr(v, "__module__", None) for v in vars(module).values()}
        assert "augserve.server.scripted" not in origins


@pytest.mark.parametrize(
    ("plan", "extra", "param", "words"),
    [
        ([], {}, "augserve_segments", "at least 1"),
        ([{"output_len": 0}], {}, "augserve_segments.0.output_len", "greater than or equal"),
        ([{"output_len": 2, "cal_time": 1}], {}, "augserve_segments.0.cal_time", "not permitted"),
        (
            [{"output_len": 2, "call_time": -1.0}, {"output_len": 1}],
            {},
            "augserve_segments.0.call_time",
            "greater than or equal",
        ),
        ([{"output_len": 2}, {"output_len": 1}], {}, "augserve_segments", "[0] has no call_time"),
        ([{"output_len": 2, "call_time": 0.1}], {}, "augserve_segments", "last segment must not"),
        (
            [{"output_len": 2, "call_time": 1e6}, {"output_len": 1}],
            {},
            "augserve_segments",
            "call_time must be <=",
        ),
        ([{"output_len": 3}], {"n": 2}, "n", "n=1"),
        ([{"output_len": 3}], {"stop": ["x"]}, "stop", "no 'stop'"),
        ([{"output_len": 3}], {"max_tokens": 5}, "max_tokens", "total output_len (3)"),
        ([{"output_len": 3}], {"prompt": [PROMPT, PROMPT]}, "prompt", "exactly one prompt"),
        ([{"output_len": 5000}], {}, "augserve_segments", "maximum context length"),
    ],
)
def test_bad_plans_are_a_400_naming_the_field(
    scripted: LiveServer, plan: list[dict[str, Any]], extra: dict[str, Any], param: str, words: str
) -> None:
    got_param, msg = error_of(post(scripted, augserve_segments=plan, **extra))
    assert got_param == param, msg
    assert words in msg


def test_a_plan_runs_its_tokens_and_calls_with_consistent_timing(scripted: LiveServer) -> None:
    plan = [
        {"output_len": 4, "call_time": 0.3, "return_len": 6},
        {"output_len": 3, "call_time": 0.2, "return_len": 2},
        {"output_len": 5},
    ]
    resp = post(scripted, augserve_segments=plan, return_token_ids=True)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"  # the plan ran to its end
    assert len(choice["token_ids"]) == 12  # generated tokens only, EOS ignored
    assert body["usage"] == {
        "prompt_tokens": 8,
        "completion_tokens": 12,
        "total_tokens": 20,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    t = choice["augserve_timing"]
    assert (t["generated_tokens"], t["returned_tokens"]) == (12, 8)
    calls = t["calls"]
    assert [c["returned_tokens"] for c in calls] == [6, 2]
    assert all(c["policy"] in ("preserve", "swap", "discard") for c in calls)
    for c, want in zip(calls, (0.3, 0.2), strict=True):
        assert want - 0.01 <= c["end"] - c["start"] <= want + 2.0  # + a loaded loop
    assert t["call_time"] == pytest.approx(sum(c["end"] - c["start"] for c in calls), abs=1e-5)
    # in order: queued, first token, first call, second call, finished
    assert 0 <= t["first_scheduled"] <= t["first_token"] <= calls[0]["start"]
    assert calls[0]["end"] <= calls[1]["start"] and calls[1]["end"] <= t["finish"]
    assert t["finish"] >= t["call_time"] + t["exec_time"] * 0.5
    assert t["norm_latency"] == pytest.approx((t["finish"] - t["call_time"]) / 12, rel=1e-6)
    scripted.wait_idle()


def test_return_token_ids_matches_the_text_and_the_stream(scripted: LiveServer) -> None:
    kw = {"max_tokens": 6, "temperature": 0.0, "ignore_eos": True, "return_token_ids": True}
    choice = post(scripted, **kw).json()["choices"][0]
    ids = choice["token_ids"]
    assert len(ids) == 6 and "augserve_timing" not in choice
    assert scripted.tokenizer.decode(ids) == choice["text"]
    assert "token_ids" not in post(scripted, max_tokens=2).json()["choices"][0]
    streamed: list[int] = []
    body = {"model": MODEL, "prompt": PROMPT, "stream": True, **kw}
    with httpx.stream("POST", scripted.url + "/v1/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for c in json.loads(line[6:])["choices"]:
                    streamed += c.get("token_ids", [])
    assert streamed == ids  # greedy: the same tokens both ways


def test_a_streamed_plan_ends_with_its_timing(scripted: LiveServer) -> None:
    plan = [{"output_len": 2, "call_time": 0.1, "return_len": 3}, {"output_len": 2}]
    body = {"model": MODEL, "prompt": PROMPT, "stream": True, "augserve_segments": plan}
    chunks = []
    with httpx.stream("POST", scripted.url + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks += json.loads(line[6:])["choices"]
    final = [c for c in chunks if c["finish_reason"]]
    assert len(final) == 1 and final[0]["finish_reason"] == "stop"
    t = final[0]["augserve_timing"]
    assert t["generated_tokens"] == 4 and len(t["calls"]) == 1
    assert t["calls"][0]["end"] - t["calls"][0]["start"] >= 0.09


def test_the_cli_flag_turns_plans_on() -> None:
    from augserve.cli import build_parser

    assert build_parser().parse_args(["serve"]).allow_scripted_tools is False
    assert build_parser().parse_args(["serve", "--allow-scripted-tools"]).allow_scripted_tools


def test_the_benchmark_replay_runs_a_tool_workload_on_the_server(scripted: LiveServer) -> None:
    """benchmarks/vs_vllm/tool_workload.replay_scripted: each request's plan runs on the
    server; its record has the planned tokens and calls, with the planned durations."""
    import asyncio
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "vs_vllm"))
    import tool_workload as tw

    scale = tw.Scale(length=0.05, time=0.02, max_context=200)
    work = tw.build_workload(3.0, 2.0, seed=1, scale=scale, vocab=500)
    assert len(work) >= 2 and any(len(r.segments) > 1 for r in work)
    out = asyncio.run(tw.replay_scripted(scripted.url, MODEL, work, deadline=60.0))
    assert out.errors == {}
    for req, rec in zip(work, out.records, strict=True):
        assert rec.num_generated_tokens == sum(s.output_len for s in req.segments)
        calls = list(req.segments[:-1])
        assert len(rec.calls) == len(calls)
        for c, s in zip(rec.calls, calls, strict=True):
            assert c.returned_tokens == s.return_len and c.policy is not None
            # the planned sleep, plus what a loaded machine adds to the event loop
            assert s.call_time - 0.01 <= c.end - c.start <= s.call_time + 2.0
        assert rec.arrival_time <= rec.first_token_time <= rec.finish_time
        assert rec.finish_time >= rec.arrival_time + rec.call_time_total
    scripted.wait_idle()


def test_a_client_gone_mid_call_aborts_the_plan(scripted: LiveServer) -> None:
    """A benchmark cancels what runs past its deadline: the plan must not keep running
    (and holding KV) on the server after its client has gone."""
    import time

    plan = [{"output_len": 2, "call_time": 30.0, "return_len": 4}, {"output_len": 50}]
    body = {"model": MODEL, "prompt": PROMPT, "stream": True, "augserve_segments": plan}
    with httpx.stream("POST", scripted.url + "/v1/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if '"token_ids"' in line or line.startswith("data: {"):
                break  # the first tokens came: the call starts next; hang up
    start = time.monotonic()
    scripted.wait_idle(timeout=10.0)
    assert time.monotonic() - start < 10.0


def test_a_client_tool_segment_ends_in_tool_calls_and_keeps_the_session(
    scripted: LiveServer,
) -> None:
    """`client_tool` on the last segment: the request ends with "tool_calls" as if the
    model had called that client tool, its KV stays paused as a client session, and
    the next turn (named by its session id) takes that KV over: only its new tokens
    are computed."""
    prompt = list(range(20, 60))  # 40 tokens
    before = scripted.metric("augserve_num_sessions_paused")
    sid = {"session_id": "bench-7"}
    plan = [{"output_len": 5, "client_tool": "run_tests"}]
    first = post(scripted, prompt=prompt, augserve_segments=plan, return_token_ids=True, **sid)
    assert first.status_code == 200, first.text
    choice = first.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and len(choice["token_ids"]) == 5
    assert scripted.metric("augserve_num_sessions_paused") == before + 1
    turn2 = prompt + choice["token_ids"] + [7, 8, 9]  # the tool's result: 3 tokens
    nxt = post(scripted, prompt=turn2, augserve_segments=[{"output_len": 2}], **sid)
    assert nxt.status_code == 200, nxt.text
    usage = nxt.json()["usage"]
    # the session's computed context: the prompt and the 4 generated tokens before the
    # last sampled one (its KV is computed with the next turn)
    assert usage["prompt_tokens_details"]["cached_tokens"] == 44
    assert nxt.json()["choices"][0]["finish_reason"] == "stop"
    assert scripted.metric("augserve_num_sessions_paused") == before


@pytest.mark.parametrize(
    ("plan", "words"),
    [
        ([{"output_len": 2, "call_time": 0.1, "client_tool": "x"}, {"output_len": 1}],
         "only the last segment"),
        ([{"output_len": 2, "client_tool": ""}], "at least 1"),
    ],
)  # fmt: skip
def test_a_client_tool_off_the_last_segment_is_a_400(
    scripted: LiveServer, plan: list[dict[str, Any]], words: str
) -> None:
    param, msg = error_of(post(scripted, augserve_segments=plan))
    assert param is not None and param.startswith("augserve_segments") and words in msg


def test_the_agent_loop_runs_sessions_with_client_calls_kept_as_sessions(
    scripted: LiveServer,
) -> None:
    """benchmarks/vs_vllm/session_loop.py through the `openai` client: every turn of every
    agent session runs, its tool on the client; with augserve's extras each turn but the
    last ends in "tool_calls" and the next turn takes its KV over (the prefix hits count
    the reuse); with the plain extras (what vLLM gets) it runs too."""
    import asyncio
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "vs_vllm"))
    import session_loop as al
    import tool_workload as tw

    scale = tw.Scale(length=0.02, time=0.01, max_context=300)
    work = tw.build_workload(2.0, 1.5, seed=2, scale=scale, vocab=500, workload="agent-sessions")
    assert len(work) >= 2 and all(len(r.segments) > 1 for r in work)
    hits = scripted.metric("augserve_prefix_cache_hits_total")
    for extras in (al.augserve_turn_extras, al.plain_turn_extras):
        out, log = asyncio.run(al.replay_agents(scripted.url, MODEL, work, 60.0, extras))
        assert out.errors == {}
        assert len(log.ttfts) == sum(len(r.segments) for r in work)
        assert sum(log.first_turn) == len(work)
        later = [c for c, f in zip(log.cached_tokens, log.first_turn, strict=True) if not f]
        assert all(c is not None and c > 0 for c in later)  # usage says what was reused
        for req, rec in zip(work, out.records, strict=True):
            assert rec.status.name == "FINISHED_STOPPED"
            assert rec.num_generated_tokens == sum(s.output_len for s in req.segments)
            assert len(rec.calls) == len(req.segments) - 1
            assert rec.finish_time >= rec.arrival_time + rec.call_time_total
        scripted.wait_idle()
        assert scripted.metric("augserve_num_sessions_paused") == 0  # all continued or ended
    assert scripted.metric("augserve_prefix_cache_hits_total") > hits


def test_bfcl_sessions_offering_the_same_tools_reuse_the_system_prompt(
    scripted: LiveServer,
) -> None:
    """Two `bfcl-multi-turn` sessions with the same tools, one after the other: the
    second's first turn finds the shared system prompt in the prefix cache (the usage
    the agent loop reads says so); a session of other tools finds none of it."""
    import asyncio
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "vs_vllm"))
    import session_loop as al
    import tool_workload as tw
    from bench_tools_report import turn_metrics

    from augserve.core.request import Segment

    shared = tw.shared_ids("bfcl:A", 64, 500)

    def session(rid: str, arrival: float, head: tuple[int, ...]) -> tw.ToolRequest:
        segs = (Segment(3, 0.01, 4, "tool"), Segment(2))
        tail = tuple(range(10 + len(rid), 26 + len(rid)))
        return tw.ToolRequest(rid, arrival, head + tail, segs, ((7, 8, 9, 10), ()), "bfcl:A")

    other = tw.shared_ids("bfcl:B", 64, 500)
    work = [session("a", 0.0, shared), session("b", 1.5, shared), session("c", 3.0, other)]
    out, log = asyncio.run(al.replay_agents(scripted.url, MODEL, work, 60.0,
                                            al.augserve_turn_extras))  # fmt: skip
    assert out.errors == {}
    firsts = [c for c, f in zip(log.cached_tokens, log.first_turn, strict=True) if f]
    assert firsts[0] == 0 and firsts[2] == 0  # the first of its tools; other tools
    assert firsts[1] is not None and 48 <= firsts[1] <= 64  # the shared prompt's full blocks
    assert turn_metrics(log)["first_turn_prefix_reuse"] > 0
