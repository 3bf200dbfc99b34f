"""An agent loop through the `openai` client: multi-turn sessions whose tools run on the client.

    from session_loop import replay_agents, augserve_turn_extras

Each session (a `ToolRequest` of `tool_workload`: prompt ids, one segment per model
turn, the tool results) runs as an agent does: it sends the whole context with
`AsyncOpenAI.completions.create` (token-id prompt, greedy, EOS ignored, streamed with
token ids), reads the model's turn, runs the tool (sleeps the segment's call time:
the tool, the client's round trip, or a person's think time), appends the result and
sends the next turn. Every turn names the session (`session_id`).

The model is random-weight, so it writes no tool calls; what the model would have
decided is given to each server in its own terms:
- vLLM: nothing (a plain completion of the turn's length); its prefix cache keeps the
  context between turns, as vLLM serves agents today;
- augserve (`augserve_turn_extras`): the turn's plan `[{"output_len": n, "client_tool":
  tool}]` (`--allow-scripted-tools`), so the turn ends with `finish_reason:
  "tool_calls"` as if the model had called the tool, and the server keeps its KV as
  a paused client session until the next turn takes it over; the last turn is plain.

The record of a session is a `Request`: its arrival, first token, finish and one
`CallRecord` per tool round trip, so `augserve.core.metrics` judges sessions as
requests (TTFT of the first turn, normalized latency over the session's generated
tokens without its tool time) and the job completion time is finish - arrival.
Each turn's TTFT is kept too, with the prompt tokens it sent and how many of them
the server's prefix cache held (`TurnLog`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from tool_workload import Replay, ToolRequest, Turn, _record

from augserve.core.request import CallRecord, Request, RequestStatus

Extras = Callable[[ToolRequest, int], dict[str, Any]]


def plain_turn_extras(req: ToolRequest, k: int) -> dict[str, Any]:
    """vLLM: only the session's name (servers that do not know it ignore it)."""
    return {"session_id": req.request_id}


def augserve_turn_extras(req: ToolRequest, k: int) -> dict[str, Any]:
    """augserve: the turn ends in a call of the client's tool (all turns but the last)."""
    seg = req.segments[k]
    step: dict[str, Any] = {"output_len": seg.output_len}
    if seg.has_call:
        step["client_tool"] = seg.tool or "tool"
    return {"session_id": req.request_id, "augserve_segments": [step]}


@dataclass
class TurnLog:
    """Every turn of a replay: its TTFT (seconds from its send), and the prompt tokens
    it sent and of those the server's prefix cache held (`usage.prompt_tokens_details
    .cached_tokens`; None where the server did not say)."""

    ttfts: list[float] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    cached_tokens: list[int | None] = field(default_factory=list)
    first_turn: list[bool] = field(default_factory=list)  # a session's first turn


def _cached(usage: Any) -> int | None:
    details = getattr(usage, "prompt_tokens_details", None)
    return getattr(details, "cached_tokens", None) if details is not None else None


async def _turn(client: Any, model: str, ctx: list[int], n: int, extra: dict[str, Any]) -> Turn:
    """One streamed completion of `n` tokens; its generated ids, times and usage."""
    body = {"ignore_eos": True, "return_token_ids": True, **extra}
    stream = await client.completions.create(
        model=model,
        prompt=ctx,
        max_tokens=n,
        temperature=0.0,
        stream=True,
        extra_body=body,
        stream_options={"include_usage": True},
    )
    turn = Turn()
    async for chunk in stream:
        for choice in chunk.choices:
            turn.add(getattr(choice, "token_ids", None) or [])
        if getattr(chunk, "usage", None) is not None:
            turn.cached = _cached(chunk.usage)
    turn.end = time.monotonic()
    if len(turn.tokens) != n:
        raise RuntimeError(f"asked {n} tokens, got {len(turn.tokens)} (token ids?)")
    return turn


async def run_session(
    client: Any, model: str, req: ToolRequest, t0: float, extras: Extras,
    errors: dict[str, str], log: TurnLog,
) -> Request:  # fmt: skip
    """One session from its arrival on; its record (times in seconds after `t0`)."""
    rec = _record(req)
    ctx = list(req.prompt_ids)
    try:
        await asyncio.sleep(max(0.0, t0 + req.arrival - time.monotonic()))
        for k, seg in enumerate(req.segments):
            sent = time.monotonic()
            turn = await _turn(client, model, ctx, seg.output_len, extras(req, k))
            if turn.first is not None:
                log.ttfts.append(turn.first - sent)
                log.prompt_tokens.append(len(ctx))
                log.cached_tokens.append(turn.cached)
                log.first_turn.append(k == 0)
                if rec.first_token_time is None:
                    rec.first_token_time = turn.first - t0
            rec.num_generated_tokens += len(turn.tokens)
            ctx += turn.tokens
            rec.finish_time = (turn.end or time.monotonic()) - t0
            if seg.has_call and k + 1 < len(req.segments):
                start = time.monotonic()
                await asyncio.sleep(seg.call_time or 0.0)  # the client runs the tool
                returned = req.returned_ids[k]
                ctx += returned
                rec.calls.append(CallRecord(start - t0, time.monotonic() - t0, len(returned)))
        rec.status = RequestStatus.FINISHED_STOPPED
    except asyncio.CancelledError:
        rec.status, rec.finish_time = RequestStatus.FINISHED_ABORTED, None
    except Exception as exc:  # an HTTP or server error loses this session, not the run
        rec.status, rec.finish_time = RequestStatus.FINISHED_ERROR, None
        errors[req.request_id] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return rec


async def replay_agents(
    base_url: str, model: str, workload: Sequence[ToolRequest], deadline: float,
    extras: Extras = plain_turn_extras,
) -> tuple[Replay, TurnLog]:  # fmt: skip
    """Every session from its arrival; whatever runs past `deadline` s is cancelled.
    Returns the replay and every turn's TTFT and prefix reuse."""
    from openai import AsyncOpenAI

    # no keep-alive: a connection idle through a long tool call may be closed by the
    # server just as it is reused
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=0)
    http = httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(deadline, connect=30.0))
    client = AsyncOpenAI(base_url=base_url + "/v1", api_key="none", http_client=http,
                         max_retries=0)  # fmt: skip
    errors: dict[str, str] = {}
    log = TurnLog()
    try:
        t0 = time.monotonic()
        tasks = [asyncio.create_task(run_session(client, model, r, t0, extras, errors, log))
                 for r in workload]  # fmt: skip
        _, pending = await asyncio.wait(tasks, timeout=deadline)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        pairs = zip(workload, tasks, strict=True)
        records = [_record(r) if t.cancelled() else t.result() for r, t in pairs]
    finally:
        await client.close()
    return Replay(records, errors), log
