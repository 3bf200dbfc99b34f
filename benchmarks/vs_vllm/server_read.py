"""A replay's records re-timed from the servers' own marks (`augserve.bench.request_marks`),
for configs with `settings.measure = "server"`.

The client-read record times a request from its scheduled arrival to the first and the
last token the client saw. The server-read one uses only what the server saw, the same
way on both sides of a comparison:

- arrival: the server has the first HTTP call's body (`body` of segment 0's call);
- first token: the server sent the first chunk carrying a token (`first`);
- finish: the server sent the last HTTP call's last chunk (`last`);
- calls: with the calls on the client (one HTTP call per segment: vLLM, the plugin),
  each call spans from the server's last chunk of one segment to the body of the next
  (the tool and the client's turnaround, neither the server's work); with the calls on
  the server (one HTTP call: augserve's scripted plans) the server's own call times,
  as the client-read record has them.

A record without its marks (the server did not run the middleware, or lost them) is an
error, counted in `missing`; unfinished and failed records stay as they are.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from tool_workload import Replay

from augserve.bench.request_marks import PATH
from augserve.core.request import CallRecord, Request, RequestStatus

Marks = Mapping[str, Mapping[str, float]]


@dataclass
class ServerRead:
    replay: Replay
    missing: int  # finished records whose marks were not all there


def take_marks(base_url: str) -> dict[str, dict[str, float]]:
    """The marks the server kept since the last read (and it forgets them)."""
    resp = httpx.get(base_url + PATH, timeout=60.0)
    resp.raise_for_status()
    marks: dict[str, dict[str, float]] = resp.json()
    return marks


def server_read(result: Replay, marks: Marks) -> ServerRead:
    records, missing = [], 0
    for rec in result.records:
        if rec.status is not RequestStatus.FINISHED_STOPPED:
            records.append(rec)
            continue
        timed = _retimed(rec, marks, result.t0)
        if timed is None:
            missing += 1
            timed = copy.copy(rec)
            timed.status, timed.finish_time = RequestStatus.FINISHED_ERROR, None
        records.append(timed)
    errors = dict(result.errors)
    return ServerRead(Replay(records, errors, result.t0, result.traces), missing)


def _retimed(rec: Request, marks: Marks, t0: float) -> Request | None:
    calls = _http_calls(rec.request_id, marks)
    if not calls or "first" not in calls[0] or any(not {"body", "last"} <= m.keys() for m in calls):
        return None
    out = copy.copy(rec)
    out.arrival_time = calls[0]["body"] - t0
    out.first_token_time = calls[0]["first"] - t0
    out.finish_time = calls[-1]["last"] - t0
    if len(calls) > 1:  # the calls ran on the client: the gaps between the HTTP calls
        if len(calls) != len(rec.calls) + 1:
            return None
        out.calls = [
            CallRecord(a["last"] - t0, b["body"] - t0, c.returned_tokens, c.policy)
            for a, b, c in zip(calls, calls[1:], rec.calls, strict=False)
        ]
    return out


def _http_calls(request_id: str, marks: Marks) -> list[Mapping[str, Any]]:
    """The marks of the request's HTTP calls, in segment order (`{id}/{k}`: mark_id)."""
    out = []
    k = 0
    while f"{request_id}/{k}" in marks:
        out.append(marks[f"{request_id}/{k}"])
        k += 1
    return out


# The pieces of a first token's time, in order: the client's own marks (`Replay.traces`,
# httpx's transport events) and the server's (`request_marks`), one clock on one machine.
SPLIT = (
    ("start", "arrival", "sent"),  # the client's loop starting the call past its arrival
    ("connect", "sent", "connection.connect_tcp.complete"),  # TCP connect
    ("send", "connection.connect_tcp.complete", "http11.send_request_body.complete"),
    ("to_server", "http11.send_request_body.complete", "body"),  # the server reading it
    ("server", "body", "first"),  # the server's own work (its marks)
    ("to_client", "first", "client_first"),  # the chunk's way to the client's loop
)


def first_token_split(replay: Replay, marks: Marks) -> dict[str, dict[str, float]]:
    """Over the requests whose first HTTP call has every mark on both sides, each piece of
    the client's time to first token (`SPLIT`, and `total`: the scheduled arrival -> the
    client's first token, the client-read TTFT): n, mean, p50, p95 in seconds. The pieces
    add up to the total per request."""
    pieces: dict[str, list[float]] = {name: [] for name, _, _ in SPLIT}
    pieces["total"] = []
    for rec in replay.records:
        mark = f"{rec.request_id}/0"
        trace, server = replay.traces.get(mark, {}), marks.get(mark, {})
        at = {**trace, "arrival": replay.t0 + rec.arrival_time, "body": server.get("body"),
              "client_first": trace.get("first"), "first": server.get("first")}  # fmt: skip
        if any(at.get(a) is None or at.get(b) is None for _, a, b in SPLIT):
            continue
        for name, a, b in SPLIT:
            pieces[name].append(at[b] - at[a])
        pieces["total"].append(at["client_first"] - at["arrival"])
    return {name: stats(xs) for name, xs in pieces.items()}


def stats(xs: list[float]) -> dict[str, float]:
    """n, mean, p50 and p95 of `xs` ({"n": 0} when empty)."""
    if not xs:
        return {"n": 0}
    s = sorted(xs)
    return {"n": len(s), "mean": sum(s) / len(s), "p50": s[len(s) // 2],
            "p95": s[min(len(s) - 1, int(0.95 * len(s)))]}  # fmt: skip
