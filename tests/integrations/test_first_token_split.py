"""The replay client's own marks of each HTTP call (`tool_workload.stream_chunks`' trace)
beside the server's (`request_marks`), over a real TCP connection: the pieces of a first
token's time (`server_read.first_token_split`) are in order and add up."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "vs_vllm"))

import managed_server as ms  # noqa: E402
import server_read as sr  # noqa: E402
import tool_workload as tw  # noqa: E402

from augserve.bench.request_marks import RequestMarks  # noqa: E402
from augserve.core.request import RequestStatus, Segment  # noqa: E402

WORK_S = 0.05  # the fake server's work before its first token


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """/v1/completions streaming `max_tokens` token ids after WORK_S; nothing else."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            break
    n = json.loads(body)["max_tokens"]
    await asyncio.sleep(WORK_S)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
    for i in range(n):
        chunk = {"choices": [{"token_ids": [100 + i], "text": "x"}]}
        await send({"type": "http.response.body", "body": f"data: {json.dumps(chunk)}\n\n".encode(),
                    "more_body": True})  # fmt: skip
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    port = ms.free_port()
    cfg = uvicorn.Config(RequestMarks(app), host="127.0.0.1", port=port, log_level="error")
    server = uvicorn.Server(cfg)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(500):  # until it listens (a bound on tries, not on time)
        if server.started:
            break
        time.sleep(0.01)
    assert server.started
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


def test_each_call_is_marked_on_both_sides_and_the_pieces_add_up(url: str) -> None:
    work = [
        tw.ToolRequest("a", 0.0, (5, 6, 7), (Segment(3, 0.05, 2), Segment(2)), ((8, 9), ())),
        tw.ToolRequest("b", 0.02, (5, 6), (Segment(4),), ((),)),
    ]
    out = asyncio.run(tw.replay(url, "m", work, 30.0))
    assert not out.errors
    assert all(r.status is RequestStatus.FINISHED_STOPPED for r in out.records)
    assert set(out.traces) == {"a/0", "a/1", "b/0"}  # every HTTP call, by its mark id
    marks = sr.take_marks(url)
    for mark, trace in out.traces.items():
        client = [trace["sent"], trace["connection.connect_tcp.complete"],
                  trace["http11.send_request_body.complete"]]  # fmt: skip
        server = [marks[mark]["body"], marks[mark]["first"]]
        # the server may hold the body before the client's loop notes its write done
        # (`to_server` can be slightly negative); everything else is in order
        order = [client[0], *server, trace["first"]]
        assert client == sorted(client) and order == sorted(order), mark
        assert marks[mark]["first"] - marks[mark]["body"] >= WORK_S
    split = sr.first_token_split(out, marks)
    assert {k: v["n"] for k, v in split.items()} == {k: 2 for k in split}  # a/0 and b/0
    parts = sum(split[name]["mean"] for name, _, _ in sr.SPLIT)
    assert parts == pytest.approx(split["total"]["mean"], abs=1e-9)
    assert split["server"]["mean"] >= WORK_S


def test_a_call_without_the_servers_marks_is_left_out() -> None:
    rec = tw._record(tw.ToolRequest("x", 0.0, (5,), (Segment(1),), ((),)))
    trace = {"sent": 1.0, "connection.connect_tcp.complete": 1.1,
             "http11.send_request_body.complete": 1.2, "first": 2.0}  # fmt: skip
    replay = tw.Replay([rec], {}, 0.9, {"x/0": trace})  # arrival 0.0 after t0 0.9
    assert sr.first_token_split(replay, {})["total"] == {"n": 0}
    split = sr.first_token_split(replay, {"x/0": {"body": 1.3, "first": 1.8}})
    assert split["to_server"]["mean"] == pytest.approx(0.1)
    assert split["to_client"]["mean"] == pytest.approx(0.2)
    assert split["start"]["mean"] == pytest.approx(0.1)
    assert split["total"]["mean"] == pytest.approx(1.1)
