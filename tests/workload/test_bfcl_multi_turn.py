"""`bfcl-multi-turn`: BFCL's multi_turn_base conversations as agent sessions."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from augserve.workload.bfcl_multi_turn import (
    BFCL_FILE,
    BFCL_MULTI_TURN,
    BfclMultiTurnProfile,
    bfcl_multi_turn,
    load_conversations,
)
from augserve.workload.registry import default_data_dir, make_workload
from augserve.workload.trace import TraceRequest

DATA = default_data_dir() / BFCL_FILE


def _conv(rid: str) -> dict:
    return next(c for c in load_conversations(DATA) if rid.startswith(c["id"] + "-"))


def test_the_derived_file_is_the_200_conversations_counts_only() -> None:
    raw = json.loads(DATA.read_text())
    assert raw["source"].startswith("bfcl-eval 2026.3.23") and "counts only" in raw["source"]
    assert raw["token_rule"] == "augserve.workload.tokenize.approx_token_count"
    convs = raw["entries"]
    assert len(convs) == 200 and len({c["id"] for c in convs}) == 200
    assert sum(len(t["steps"]) for c in convs for t in c["turns"]) == 1142
    text_fields = {k for c in convs for t in c["turns"] for s in t["steps"] for k in s}
    assert text_fields == {"call_tokens", "result_tokens"}  # no BFCL text copied
    assert all(c["system_tokens"] > 1000 for c in convs)  # the tools' docs


def test_each_session_is_its_conversation_step_by_step() -> None:
    trace = bfcl_multi_turn(60, seed=3, data_dir=default_data_dir())
    assert trace == make_workload("bfcl-multi-turn", 60, seed=3)  # seeded, by name
    assert trace != bfcl_multi_turn(60, seed=4, data_dir=default_data_dir())
    for r in trace:
        conv = _conv(r.request_id)
        turns = conv["turns"]
        assert r.shared_prefix == conv["system_tokens"]
        assert r.prompt_len == conv["system_tokens"] + turns[0]["user_tokens"]
        segs = list(r.segments)
        for k, turn in enumerate(turns):
            for step in turn["steps"]:  # a call, the tool, its result read back
                s = segs.pop(0)
                assert (s.output_len, s.return_len, s.tool) == (
                    step["call_tokens"],
                    step["result_tokens"],
                    "tool",
                )
                assert s.call_time is not None and s.call_time >= BFCL_MULTI_TURN.client_rtt
            answer = segs.pop(0)  # the turn's answer, then the user's next message
            assert 8 <= answer.output_len <= 400
            if k + 1 < len(turns):
                assert answer.tool == "user" and answer.return_len == turns[k + 1]["user_tokens"]
                assert answer.call_time is not None and 2.0 <= answer.call_time <= 300.0
            else:
                assert not answer.has_call
        assert segs == []


def test_sessions_offering_the_same_tools_share_their_system_prompt() -> None:
    trace = bfcl_multi_turn(200, seed=0, data_dir=default_data_dir())
    by_kind: dict[str, set[int]] = defaultdict(set)
    for r in trace:
        assert r.kind is not None and r.kind.startswith("bfcl:")
        by_kind[r.kind].add(r.shared_prefix)
    assert all(len(v) == 1 for v in by_kind.values())  # one system prompt per kind
    assert 20 <= len(by_kind) < 200  # shared by many sessions: something to reuse
    assert len({r.request_id.rsplit("-", 1)[0] for r in trace}) == 200  # each once


def test_more_sessions_than_conversations_draw_them_again_and_latencies_are_as_stated() -> None:
    trace = bfcl_multi_turn(500, seed=1, data_dir=default_data_dir())
    assert len(trace) == 500 and len({r.request_id for r in trace}) == 500
    tools = [s.call_time - BFCL_MULTI_TURN.client_rtt for r in trace for s in r.segments
             if s.tool == "tool"]  # fmt: skip
    thinks = [s.call_time for r in trace for s in r.segments if s.tool == "user"]
    assert 0.2 < float(np.median(tools)) < 0.45  # log-normal, median 0.3 s
    assert 11.0 < float(np.median(thinks)) < 20.0  # median 15 s
    assert min(tools) >= 0.01 - 1e-12 and max(tools) <= 30.0


def test_bad_inputs_raise_naming_the_field(tmp_path) -> None:
    with pytest.raises(ValueError, match="client_rtt"):
        BfclMultiTurnProfile(client_rtt=-1.0)
    with pytest.raises(ValueError, match="n must be"):
        bfcl_multi_turn(-1, seed=0, data_dir=default_data_dir())
    (tmp_path / "bfcl").mkdir()
    (tmp_path / "bfcl" / "multi_turn_base.json").write_text('{"entries": []}')
    with pytest.raises(ValueError, match="derive_multi_turn"):
        bfcl_multi_turn(1, seed=0, data_dir=tmp_path)
    with pytest.raises(ValueError, match="shared_prefix"):
        TraceRequest("x", 4, make_workload("agent-sessions", 1, 0)[0].segments, None, "k", 5)
    with pytest.raises(ValueError, match="needs a kind"):
        TraceRequest("x", 4, make_workload("agent-sessions", 1, 0)[0].segments, None, None, 2)


def test_workload_gen_writes_the_shared_prefix_and_reads_it_back(tmp_path) -> None:
    from augserve.workload.jsonl import read_jsonl, write_jsonl

    trace = bfcl_multi_turn(8, seed=2, data_dir=default_data_dir())
    write_jsonl(tmp_path / "b.jsonl", trace)
    assert read_jsonl(tmp_path / "b.jsonl").requests == trace.requests
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"request_id": "x", "prompt_len": 4, "shared_prefix": 9, "kind": "k", '
                   '"segments": [{"output_len": 1}]}\n')  # fmt: skip
    with pytest.raises(ValueError, match="shared_prefix"):
        read_jsonl(bad)
