"""benchmarks/vs_vllm/tool_workload.py: scaling, client-side calls over a fake server, cleanup."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "vs_vllm"))

import managed_server as ms  # noqa: E402
import tool_workload as tw  # noqa: E402

from augserve.core.metrics import SLOConfig  # noqa: E402
from augserve.core.request import RequestStatus, Segment  # noqa: E402
from augserve.integrations.plan import decode_plan  # noqa: E402
from augserve.workload import make_workload  # noqa: E402


def test_scaled_requests_fit_and_end_without_a_call() -> None:
    scale = tw.Scale(length=0.25, time=0.1, max_context=300)
    for tr in make_workload("infercept", 300, 1):
        prompt, segs = tw.scale_request(tr, scale)
        ctx = prompt + sum(s.output_len + s.return_len for s in segs)
        assert ctx <= 300 and all(s.output_len >= 1 for s in segs)
        assert not segs[-1].has_call
        for s, orig in zip(segs, tr.segments, strict=False):
            if s.has_call:
                assert s.call_time == pytest.approx(orig.call_time * 0.1)


def test_workload_is_seeded_and_poisson() -> None:
    a = tw.build_workload(2.0, 60.0, seed=3, vocab=500)
    assert a == tw.build_workload(2.0, 60.0, seed=3, vocab=500)
    assert a != tw.build_workload(2.0, 60.0, seed=4, vocab=500)
    assert 80 <= len(a) <= 160 and all(0 <= r.arrival <= 60.0 for r in a)
    assert all(3 <= t < 500 for r in a for t in r.prompt_ids)
    assert all(len(r.returned_ids[k]) == s.return_len for r in a for k, s in enumerate(r.segments))


class FakeServer:
    """A /v1/completions that streams `max_tokens` ids (token_ids deltas), recording bodies."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.fail = fail or set()
        self.next_id = 1000

    async def __call__(self, request: Any) -> Any:
        body = json.loads(request.content)
        self.bodies.append(body)
        if body.get("session_id") in self.fail:
            return httpx.Response(500, text="boom")
        chunks = []
        for _ in range(body["max_tokens"]):
            self.next_id += 1
            chunks.append({"choices": [{"token_ids": [self.next_id], "text": "x"}]})
        sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return httpx.Response(200, content=sse.encode())


def req(rid: str, arrival: float, segs: list[Segment]) -> Any:
    rets = tuple(tuple(range(7, 7 + s.return_len)) for s in segs)
    return tw.ToolRequest(rid, arrival, (5, 6, 7, 8), tuple(segs), rets)


def test_replay_ends_each_turn_at_the_call_and_resubmits_the_context() -> None:
    fake = FakeServer()
    work = [
        req("a", 0.0, [Segment(3, 0.2, 2), Segment(2, 0.1, 1), Segment(1)]),
        req("b", 0.05, [Segment(4)]),
    ]
    out = asyncio.run(
        tw.replay("http://fake", "m", work, 10.0, transport=httpx.MockTransport(fake))
    )
    a, b = out.records
    assert not out.errors and a.status is b.status is RequestStatus.FINISHED_STOPPED
    assert (a.num_generated_tokens, b.num_generated_tokens) == (6, 4)
    assert [c.returned_tokens for c in a.calls] == [2, 1]
    assert a.calls[0].end - a.calls[0].start >= 0.2 and a.calls[1].end - a.calls[1].start >= 0.1
    turns = [body for body in fake.bodies if body["session_id"] == "a"]
    assert [t["max_tokens"] for t in turns] == [3, 2, 1]
    for prev, nxt, ret in zip(turns, turns[1:], (2, 1), strict=False):
        generated = nxt["prompt"][len(prev["prompt"]) : len(prev["prompt"]) + prev["max_tokens"]]
        assert nxt["prompt"][: len(prev["prompt"])] == prev["prompt"]  # whole context again
        assert len(nxt["prompt"]) == len(prev["prompt"]) + prev["max_tokens"] + ret
        assert all(t > 1000 for t in generated)  # the ids the server generated
    plans = [decode_plan(t["vllm_xargs"]["augserve_plan"]) for t in turns]
    assert [len(p) for p in plans] == [3, 2, 1] and plans[1] == list(work[0].segments[1:])
    assert all(t["ignore_eos"] and t["temperature"] == 0.0 and t["stream"] for t in turns)
    m = tw.summarize(out.records, SLOConfig(norm_latency_slo=10.0, ttft_slo=10.0), 10.0)
    assert (m.num_finished, m.num_met_slo) == (2, 2)
    assert a.finish_time is not None and a.finish_time - a.arrival_time >= 0.3


def test_failed_and_late_requests_are_unfinished() -> None:
    fake = FakeServer(fail={"bad"})
    work = [
        req("bad", 0.0, [Segment(2)]),
        req("late", 5.0, [Segment(2)]),
        req("ok", 0.0, [Segment(1)]),
    ]
    t0 = time.monotonic()
    out = asyncio.run(tw.replay("http://fake", "m", work, 0.5, transport=httpx.MockTransport(fake)))
    # the deadline cancels the late one: never sent, and the replay did not wait for its
    # arrival at 5 s (a bound from the workload, not the machine's speed)
    assert time.monotonic() - t0 < 5.0
    assert sorted(b.get("session_id") for b in fake.bodies) == ["bad", "ok"]
    status = {r.request_id: r.status for r in out.records}
    assert status == {
        "bad": RequestStatus.FINISHED_ERROR,
        "late": RequestStatus.FINISHED_ABORTED,
        "ok": RequestStatus.FINISHED_STOPPED,
    }
    assert "HTTP 500" in out.errors["bad"] and set(out.errors) == {"bad"}


SERVER = textwrap.dedent(
    """
    import http.server, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404); self.end_headers()
        def log_message(self, *a): pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
    """
)


def test_managed_server_is_healthy_then_gone_with_its_children(tmp_path: Path) -> None:
    port = ms.free_port()
    srv = ms.ManagedServer(
        [sys.executable, "-c", SERVER, str(port)], port, {}, tmp_path / "server.log"
    )
    with srv:
        assert srv.proc is not None
        pgid = srv.proc.pid
        assert httpx.get(srv.base_url + "/health").status_code == 200
        assert not ms.port_free(port)
    assert srv.proc is None and ms.port_free(port)
    gone = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True)
    assert gone.returncode == 1  # no process left in the server's group (the child too)


def test_a_stream_that_arrives_in_one_burst_is_not_timed() -> None:
    steady = [0.02 + 0.01 * i for i in range(65)]  # first chunk at 20 ms, then 10 ms apart
    assert tw.streamed(0.0, steady)
    burst = [0.66 + 2e-5 * i for i in range(65)]  # all 65 chunks after the whole request
    assert not tw.streamed(0.0, burst)


def test_sessions_of_one_kind_start_with_the_same_ids_and_others_do_not() -> None:
    scale = tw.Scale(length=0.05, time=0.01, max_context=600)
    work = tw.build_workload(3.0, 40.0, seed=5, scale=scale, vocab=500,
                             workload="bfcl-multi-turn")  # fmt: skip
    trace = make_workload("bfcl-multi-turn", len(work), 5)
    by_kind: dict[str, list[tuple[int, ...]]] = {}
    for req, tr in zip(work, trace, strict=True):
        shared = round(tr.shared_prefix * 0.05)
        assert shared > 0 and req.kind == tr.kind
        by_kind.setdefault(tr.kind or "", []).append(req.prompt_ids[:shared])
    firsts = {k: v[0] for k, v in by_kind.items()}
    assert any(len(v) > 1 for v in by_kind.values())  # something is shared
    assert all(p == firsts[k] for k, v in by_kind.items() for p in v)
    assert len(set(firsts.values())) == len(firsts)  # kinds apart


def test_a_workload_without_shared_prefixes_draws_its_ids_as_before() -> None:
    """`shared_prefix` 0 (every workload but bfcl-multi-turn) draws no extra ids: the
    committed comparisons' workloads are unchanged."""
    import random

    a = tw.build_workload(2.0, 10.0, seed=3, vocab=500)
    rng = random.Random("tool-workload-3")
    for r in a:
        assert r.prompt_ids == tuple(rng.randrange(3, 500) for _ in r.prompt_ids)
        for rets in r.returned_ids:
            assert rets == tuple(rng.randrange(3, 500) for _ in rets)
