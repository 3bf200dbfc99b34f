"""Server-side request marks on our own server (`--middleware`), read the way
bench_tools.py reads them (`benchmarks/vs_vllm/server_read.py`): a replay with the
calls on the client, re-timed from the marks, agrees with what the client saw and
leaves out only what the server did not see."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from conftest import MODEL, start_server

from augserve.bench.request_marks import RequestMarks
from augserve.core.request import RequestStatus, Segment

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "vs_vllm"))
import tool_workload as tw  # noqa: E402
from server_read import server_read, take_marks  # noqa: E402


def test_a_replay_read_on_the_server(chat_model_dir: Path) -> None:
    srv = start_server(chat_model_dir, middleware=(RequestMarks,))
    try:
        url = srv.handle.url
        assert take_marks(url) == {}  # nothing marked before
        work = [
            tw.ToolRequest(
                "a", 0.0, (5, 6, 7, 8), (Segment(3, 0.3, 2), Segment(2)), ((9, 10), ())
            ),  # fmt: skip
            tw.ToolRequest("b", 0.05, (5, 6, 7), (Segment(4),), ((),)),
        ]
        result = asyncio.run(tw.replay(url, MODEL, work, 60.0, lambda r, k: {}))
        assert all(r.status is RequestStatus.FINISHED_STOPPED for r in result.records)
        marks = take_marks(url)
        assert set(marks) == {"a/0", "a/1", "b/0"} and take_marks(url) == {}
        read = server_read(result, marks)
    finally:
        srv.stop()
    assert read.missing == 0
    for client, server in zip(result.records, read.replay.records, strict=True):
        assert server.status is RequestStatus.FINISHED_STOPPED
        # the server sees a request after the client schedules it, and its first and last
        # token before the client does
        assert server.arrival_time >= client.arrival_time
        assert server.first_token_time is not None and client.first_token_time is not None
        assert server.arrival_time < server.first_token_time <= client.first_token_time
        assert server.finish_time is not None and client.finish_time is not None
        assert server.first_token_time <= server.finish_time <= client.finish_time
        assert server.num_generated_tokens == client.num_generated_tokens
    a_client, a_server = result.records[0], read.replay.records[0]
    # the call, server-read, spans from the first turn's last chunk to the second body:
    # the client's own call (0.3 s) and its turnaround
    assert len(a_server.calls) == 1 and a_server.call_time_total >= a_client.call_time_total >= 0.3


def test_records_without_marks_are_errors_not_timed_by_the_client() -> None:
    rec = tw._record(tw.ToolRequest("x", 0.0, (5,), (Segment(2),), ((),)))
    rec.status, rec.first_token_time, rec.finish_time = RequestStatus.FINISHED_STOPPED, 0.1, 0.2
    read = server_read(tw.Replay([rec], {}, 0.0), {})
    assert read.missing == 1 and read.replay.records[0].status is RequestStatus.FINISHED_ERROR
    assert read.replay.records[0].finish_time is None
