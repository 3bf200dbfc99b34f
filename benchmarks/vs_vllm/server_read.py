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
    return ServerRead(Replay(records, errors, result.t0), missing)


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
