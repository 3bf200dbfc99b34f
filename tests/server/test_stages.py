"""Where a streamed request's time to its first token goes (`server/stages.py`), and the
event loop's lag, on /metrics.

Timings are checked as lower bounds the test itself causes (a preparation pool held
busy, a loop blocked), never against an upper bound a loaded machine could break."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import MODEL, LiveServer
from prometheus_client import CollectorRegistry

from augserve.server.stages import MARKS, STAGES, LoopLag, StageClock, StageMetrics

STAGE = "augserve_request_stage_seconds"


def _stage_counts(srv: LiveServer) -> dict[str, float]:
    return {s: srv.metric(STAGE + "_count", stage=s) for s in STAGES}


def _stage_sums(srv: LiveServer) -> dict[str, float]:
    return {s: srv.metric(STAGE + "_sum", stage=s) for s in STAGES}


def _stream(srv: LiveServer, seed: int, client: httpx.Client | None = None) -> float:
    """A streamed chat request (on a new connection unless `client` is given); the
    seconds from sending it to its first token's chunk."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "seed": seed,
            "stream": True}  # fmt: skip
    start, first = time.monotonic(), None
    opener: Any = client if client is not None else httpx
    with opener.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if first is None and line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                first = time.monotonic() if delta.get("content") else None
    assert first is not None
    return first - start


def test_a_clock_marks_each_stage_once_in_order() -> None:
    clock = StageClock()
    for k, name in enumerate(MARKS):
        assert clock.durations() is None  # incomplete until the last mark
        clock.mark(name, now=10.0 + k * k)
    clock.mark("arrived", now=99.0)  # a second mark (another choice's) keeps the first
    d = clock.durations()
    assert d is not None and list(d) == list(STAGES)
    assert d == {s: float(2 * k + 1) for k, s in enumerate(STAGES)}  # (k+1)^2 - k^2
    assert sum(d.values()) == clock.marks["sent"] - clock.marks["connected"]
    with pytest.raises(ValueError, match="unknown mark 'queued'"):
        clock.mark("queued")


def test_the_protocol_s_marks_are_optional_the_app_s_are_not() -> None:
    clock = StageClock()
    for k, name in enumerate(MARKS[1:]):  # no `connected`: a reused connection
        clock.mark(name, now=float(k))
    d = clock.durations()
    assert d is not None and "connect" not in d and list(d) == list(STAGES[1:])
    clock = StageClock()
    for k, name in enumerate(MARKS):
        if name != "read":
            clock.mark(name, now=float(k))
    assert clock.durations() is None  # an app mark missing: not complete


def test_a_complete_clock_is_observed_once() -> None:
    m = StageMetrics(CollectorRegistry())
    clock = StageClock()
    assert not m.observe(clock) and not m.observe(None)
    for k, name in enumerate(MARKS):
        clock.mark(name, now=float(k))
    assert m.observe(clock) and not m.observe(clock)
    for s in STAGES:
        assert m.seconds.labels(s)._sum.get() == 1.0  # type: ignore[attr-defined]


def test_a_streamed_request_adds_one_to_every_stage(server: LiveServer) -> None:
    server.script(31, "one two")
    before, sums = _stage_counts(server), _stage_sums(server)
    waited = _stream(server, 31)
    after = _stage_counts(server)
    assert {s: after[s] - before[s] for s in STAGES} == {s: 1.0 for s in STAGES}
    # the stages run from the server's first sight of the request to the bytes it sent:
    # inside what the client waited, whatever the load
    spent = sum(_stage_sums(server).values()) - sum(sums.values())
    assert 0.0 < spent <= waited


def test_a_kept_alive_connection_s_second_request_has_no_connect_stage(
    server: LiveServer,
) -> None:
    server.script(35, "one")
    server.script(36, "two")
    before = _stage_counts(server)
    with httpx.Client() as client:
        _stream(server, 35, client)
        _stream(server, 36, client)  # the same connection, kept alive
    after = _stage_counts(server)
    added = {s: after[s] - before[s] for s in STAGES}
    assert added == {s: (1.0 if s == "connect" else 2.0) for s in STAGES}


def test_a_request_not_streamed_is_not_observed(server: LiveServer) -> None:
    server.script(32, "one two")
    before = _stage_counts(server)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "seed": 32}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200
    assert _stage_counts(server) == before


def test_a_busy_preparation_pool_shows_as_the_prep_queue_stage(server: LiveServer) -> None:
    pool = server.state.preparer.pool
    release = threading.Event()
    held = [pool.submit(release.wait) for _ in range(pool.workers)]
    server.script(33, "one")
    before = server.metric(STAGE + "_sum", stage="prep_queue")
    result: dict[str, Any] = {}
    client = threading.Thread(target=lambda: result.update(t=_stream(server, 33)))
    client.start()
    deadline = time.monotonic() + 60
    while pool.pending <= pool.workers and time.monotonic() < deadline:
        time.sleep(0.005)  # until the request waits behind the held workers
    time.sleep(0.3)  # then it waits at least this long more
    release.set()
    client.join(timeout=60)
    for fut in held:
        fut.result(timeout=10)
    assert "t" in result
    waited = server.metric(STAGE + "_sum", stage="prep_queue") - before
    assert waited >= 0.3
    assert result["t"] >= waited


def test_loop_lag_records_a_blocked_loop() -> None:
    m = StageMetrics(CollectorRegistry())

    async def run() -> None:
        lag = LoopLag(m, interval=0.01)
        lag.start()
        await asyncio.sleep(0.05)  # the probe runs
        time.sleep(0.3)  # holds the loop: the probe wakes at least ~0.29 s late
        for _ in range(100):
            await asyncio.sleep(0.01)
            if _over(m, 0.25) > 0:
                break
        await lag.stop()

    asyncio.run(run())
    assert _over(m, 0.25) >= 1  # the blocked wake
    with pytest.raises(ValueError, match="interval"):
        LoopLag(m, interval=0.0)


def _over(m: StageMetrics, bound: float) -> float:
    """Probes that woke more than `bound` seconds late."""
    samples = {s.labels.get("le"): s.value for s in m.lag.collect()[0].samples
               if s.name.endswith("_bucket")}  # fmt: skip
    return samples["+Inf"] - samples[str(bound)]


def test_the_first_token_diagnosis_reads_the_stages_of_one_request(server: LiveServer) -> None:
    """benchmarks/vs_vllm/diag_first_token.py's reading of /metrics, on a real server."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "vs_vllm"))
    import diag_first_token as diag

    server.script(34, "one two")
    before = diag.server_stages(server.url)
    waited = _stream(server, 34)
    rows = diag.stage_deltas(before, diag.server_stages(server.url))
    assert {s: rows[s]["count"] for s in STAGES} == {s: 1.0 for s in STAGES}
    assert sum(rows[s]["mean"] for s in STAGES) <= waited
    for s in STAGES:  # one observation: each quantile's bound is the bucket holding it
        assert rows[s]["p50_le"] == rows[s]["p99_le"] >= rows[s]["mean"]
    assert "loop_lag" in rows  # the probe runs beside every request
