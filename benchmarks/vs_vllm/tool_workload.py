"""The tool-augmented workload replayed against any OpenAI-compatible server, calls on the client.

    from tool_workload import Scale, build_workload, replay, summarize

- `build_workload`: the INFERCEPT trace (`augserve.workload`, shipped
  `merged_exp_uniform.json`) resampled to `rate * duration` requests with Poisson
  arrivals, lengths and call times scaled by `Scale` to fit a CPU run, prompts and
  call results as seeded random token ids.
- `replay`: each request's segments over `/v1/completions` (token-id prompts,
  greedy, `ignore_eos`, streamed with token ids). A call ends the request: the
  client sleeps the call's (scaled) duration, then sends the whole context plus
  the returned tokens as a new request in the same session (`session_id`), so the
  server's prefix cache can reuse it, as users run vLLM. `extra_body(req, k)` adds
  server-specific fields (`vllm_extras` passes our plan for the oracle predictor).
- `replay_scripted`: the same workload against `augserve serve --allow-scripted-tools`:
  each request is sent once with its plan (`augserve_segments`); the server
  generates each segment, pauses the request for its call (KV preserved, swapped
  or discarded as its policy decides) and goes on. TTFT and finish are measured on
  the client as for `replay`; the calls' times come from the server's
  `augserve_timing`.
- `summarize`: `augserve.core.metrics` over the replay's records under one SLO.

No vLLM import: it runs in either virtual environment.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from augserve.bench.request_marks import HEADER as MARK_HEADER_BYTES
from augserve.core.metrics import MetricsSummary, SLOConfig, compute_metrics
from augserve.core.request import CallRecord, ContextPolicy, Request, RequestStatus, Segment
from augserve.integrations.plan import PLAN_KEY, encode_plan
from augserve.workload import make_workload, poisson_arrivals
from augserve.workload.trace import TraceRequest

MARK_HEADER = MARK_HEADER_BYTES.decode()

VOCAB_LOW = 3  # ids 0-2 are <s>, </s>, <pad> in `augserve make-model` models


@dataclass(frozen=True)
class Scale:
    """How the trace is shrunk to a CPU run: token lengths x `length`, call times x
    `time`; a request's whole context is kept under `max_context` tokens."""

    length: float = 0.25
    time: float = 0.1
    max_context: int = 1900
    min_prompt: int = 4

    def __post_init__(self) -> None:
        if not 0 < self.length <= 1 or not 0 < self.time <= 1:
            raise ValueError(f"Scale.length and Scale.time must be in (0, 1], got {self}")
        if self.max_context < self.min_prompt + 2:
            raise ValueError(f"Scale.max_context too small: {self.max_context}")


@dataclass(frozen=True)
class ToolRequest:
    request_id: str
    arrival: float  # seconds after the replay starts
    prompt_ids: tuple[int, ...]
    segments: tuple[Segment, ...]  # the last makes no call
    returned_ids: tuple[tuple[int, ...], ...]  # per segment, the call's result
    kind: str | None = None


def scale_request(tr: TraceRequest, scale: Scale) -> tuple[int, list[Segment]]:
    """Scaled prompt length and segments; a trailing call gets a 1-token final segment
    (as in the simulator); segments past `max_context` are dropped."""
    prompt = max(scale.min_prompt, round(tr.prompt_len * scale.length))
    prompt = min(prompt, scale.max_context - 2)
    segs: list[Segment] = []
    ctx = prompt
    for s in tr.segments:
        out = max(1, round(s.output_len * scale.length))
        ret = max(1, round(s.return_len * scale.length)) if s.return_len else 0
        if ctx + out + ret + 1 > scale.max_context:
            break
        call = None if s.call_time is None else s.call_time * scale.time
        segs.append(Segment(out, call, ret if call is not None else 0, s.tool))
        ctx += out + (ret if call is not None else 0)
    if not segs:
        segs = [Segment(max(1, min(8, scale.max_context - prompt - 1)))]
    if segs[-1].has_call:
        segs.append(Segment(1))
    return prompt, segs


def build_workload(
    rate: float, duration: float, seed: int = 0, scale: Scale = Scale(), vocab: int = 32000,
    workload: str = "infercept",
) -> list[ToolRequest]:  # fmt: skip
    """Poisson arrivals at `rate` over `duration` seconds, requests of `workload` (an
    `augserve.workload` name: the INFERCEPT trace, or `agent-sessions` /
    `bfcl-multi-turn`: one request per session, a segment per model turn), scaled.
    Requests of one kind with a `shared_prefix` start with the same ids."""
    times = poisson_arrivals(rate, duration=duration, seed=seed)
    trace = make_workload(workload, max(1, len(times)), seed)
    rng = random.Random(f"tool-workload-{seed}")
    out = []
    for i, (tr, t) in enumerate(zip(trace, times, strict=False)):
        prompt, segs = scale_request(tr, scale)
        shared = min(prompt, round(tr.shared_prefix * scale.length))
        ids = shared_ids(tr.kind, shared, vocab) + tuple(
            rng.randrange(VOCAB_LOW, vocab) for _ in range(prompt - shared)
        )
        rets = tuple(
            tuple(rng.randrange(VOCAB_LOW, vocab) for _ in range(s.return_len)) for s in segs
        )
        out.append(ToolRequest(f"r{seed}-{i}", t, ids, tuple(segs), rets, tr.kind))
    return out


def shared_ids(kind: str | None, n: int, vocab: int) -> tuple[int, ...]:
    """The `n` prompt ids every request of `kind` starts with (its system prompt)."""
    rng = random.Random(f"shared-prefix-{kind}")
    return tuple(rng.randrange(VOCAB_LOW, vocab) for _ in range(n))


def vllm_extras(req: ToolRequest, k: int) -> dict[str, Any]:
    """vLLM fields: the plan of the remaining segments for our scheduler's oracle."""
    return {"vllm_xargs": {PLAN_KEY: encode_plan(req.segments[k:])}}


@dataclass
class Turn:
    tokens: list[int] = field(default_factory=list)
    first: float | None = None  # monotonic time of the first generated token
    end: float | None = None
    cached: int | None = None  # prompt tokens the server's prefix cache held (usage)

    def add(self, ids: Sequence[int]) -> None:
        """Streamed token ids arrived (the first non-empty ones time the first token)."""
        if ids and self.first is None:
            self.first = time.monotonic()
        self.tokens.extend(ids)


def trace_hook(trace: dict[str, float]) -> Callable[[str, Any], Awaitable[None]]:
    """An httpx `trace` extension writing the first time.monotonic() of each transport
    event of one call into `trace` (`connection.connect_tcp.complete`,
    `http11.send_request_body.complete`, `http11.receive_response_headers.complete`, ...)."""

    async def hook(event: str, info: Any) -> None:
        trace.setdefault(event, time.monotonic())

    return hook


async def stream_chunks(
    client: httpx.AsyncClient, body: dict[str, Any], mark: str | None = None,
    trace: dict[str, float] | None = None,
) -> AsyncIterator[dict[str, Any]]:  # fmt: skip
    """The JSON chunks of one streamed `/v1/completions` call (server-sent events); an
    HTTP error or an error chunk raises RuntimeError. `mark`: the id under which a
    server running `augserve.bench.request_marks` keeps this call's times; `trace`:
    filled with the client's side of the same call (`trace_hook`, and `sent`: the call
    began)."""
    headers = {} if mark is None else {MARK_HEADER: mark}
    ext = {}
    if trace is not None:
        trace["sent"] = time.monotonic()
        ext["trace"] = trace_hook(trace)
    async with client.stream(
        "POST", "/v1/completions", json=body, headers=headers, extensions=ext
    ) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode(errors="replace")[:300]
            raise RuntimeError(f"HTTP {resp.status_code}: {text}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"server error: {str(chunk['error'])[:300]}")
            yield chunk


async def complete(
    client: httpx.AsyncClient,
    model: str,
    ctx: Sequence[int],
    max_tokens: int,
    extra: dict[str, Any],
    mark: str | None = None,
    trace: dict[str, float] | None = None,
) -> Turn:
    """One streamed `/v1/completions` call; the generated ids (the server must return them)."""
    body = {
        "model": model, "prompt": list(ctx), "max_tokens": max_tokens, "temperature": 0.0,
        "ignore_eos": True, "stream": True, "return_token_ids": True, **extra,
    }  # fmt: skip
    turn = Turn()
    async for chunk in stream_chunks(client, body, mark, trace):
        choices = chunk.get("choices") or []
        ids = choices[0].get("token_ids") if choices else None
        if ids is not None:
            turn.add(ids)
    turn.end = time.monotonic()
    if trace is not None and turn.first is not None:
        trace["first"] = turn.first
    if len(turn.tokens) != max_tokens:
        raise RuntimeError(f"asked {max_tokens} tokens, got {len(turn.tokens)} (token ids?)")
    return turn


@dataclass
class Replay:
    """One replay: a record per request (times in seconds after the start) and the
    error of each request that failed."""

    records: list[Request]
    errors: dict[str, str]
    t0: float = 0.0  # the start, in time.monotonic() (server-side marks are read against it)
    # per HTTP call (`mark_id`), the client's side of it (`stream_chunks`' trace)
    traces: dict[str, dict[str, float]] = field(default_factory=dict)


async def run_request(
    client: httpx.AsyncClient, model: str, req: ToolRequest, t0: float,
    extra_body: Callable[[ToolRequest, int], dict[str, Any]], errors: dict[str, str],
    traces: dict[str, dict[str, float]],
) -> Request:  # fmt: skip
    """Replay one request from its arrival on; returns its record (times after t0)."""
    rec = _record(req)
    ctx = list(req.prompt_ids)
    try:
        await asyncio.sleep(max(0.0, t0 + req.arrival - time.monotonic()))
        for k, seg in enumerate(req.segments):
            extra = {"session_id": req.request_id, **extra_body(req, k)}
            mark = mark_id(req, k)
            trace = traces.setdefault(mark, {})
            turn = await complete(client, model, ctx, seg.output_len, extra, mark, trace)
            if rec.first_token_time is None and turn.first is not None:
                rec.first_token_time = turn.first - t0
            rec.num_generated_tokens += len(turn.tokens)
            ctx += turn.tokens
            rec.finish_time = (turn.end or time.monotonic()) - t0
            if seg.has_call and k + 1 < len(req.segments):
                start = time.monotonic()
                await asyncio.sleep(seg.call_time or 0.0)
                ctx += req.returned_ids[k]
                end = time.monotonic()
                rec.calls.append(CallRecord(start - t0, end - t0, len(req.returned_ids[k])))
        rec.status = RequestStatus.FINISHED_STOPPED
    except asyncio.CancelledError:
        rec.status, rec.finish_time = RequestStatus.FINISHED_ABORTED, None
    except (httpx.HTTPError, RuntimeError) as exc:
        rec.status, rec.finish_time = RequestStatus.FINISHED_ERROR, None
        errors[req.request_id] = f"{type(exc).__name__}: {exc}"
    return rec


async def replay(
    base_url: str, model: str, workload: Sequence[ToolRequest], deadline: float,
    extra_body: Callable[[ToolRequest, int], dict[str, Any]] = vllm_extras,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Replay:  # fmt: skip
    """All requests, each from its arrival; whatever runs past `deadline` seconds is cancelled."""

    def start(client: httpx.AsyncClient, r: ToolRequest, t0: float, sink: Replay) -> Any:
        return run_request(client, model, r, t0, extra_body, sink.errors, sink.traces)

    return await _replay_all(base_url, workload, deadline, transport, start)


async def _replay_all(
    base_url: str, workload: Sequence[ToolRequest], deadline: float,
    transport: httpx.AsyncBaseTransport | None,
    start: Callable[[httpx.AsyncClient, ToolRequest, float, Replay], Any],
) -> Replay:  # fmt: skip
    """Run `start(client, request, t0, sink)` for every request (it fills the sink's
    errors and traces); cancel at `deadline`."""
    # no keep-alive: a pooled connection idle through a long call may be closed by the
    # server (uvicorn's keep-alive timeout is 5 s) just as it is reused (ReadError)
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=0)
    timeout = httpx.Timeout(deadline, connect=30.0)
    sink = Replay([], {})
    async with httpx.AsyncClient(
        base_url=base_url, timeout=timeout, limits=limits, transport=transport
    ) as client:
        t0 = time.monotonic()
        tasks = [asyncio.create_task(start(client, r, t0, sink)) for r in workload]
        _, pending = await asyncio.wait(tasks, timeout=deadline)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        pairs = zip(workload, tasks, strict=True)
        records = [_record(r) if t.cancelled() else t.result() for r, t in pairs]
        return Replay(records, sink.errors, t0, sink.traces)


def scripted_plan(req: ToolRequest) -> list[dict[str, Any]]:
    """The request's segments as an `augserve_segments` plan."""
    plan: list[dict[str, Any]] = []
    for k, s in enumerate(req.segments):
        seg: dict[str, Any] = {"output_len": s.output_len}
        if k + 1 < len(req.segments):  # every segment but the last ends in a call
            seg["call_time"] = s.call_time or 0.0
            seg["return_len"] = s.return_len
        plan.append(seg)
    return plan


async def run_scripted(
    client: httpx.AsyncClient, model: str, req: ToolRequest, t0: float, errors: dict[str, str],
    traces: dict[str, dict[str, float]],
) -> Request:  # fmt: skip
    """Replay one request as a single scripted completion; its record (times after t0)."""
    rec = _record(req)
    try:
        await asyncio.sleep(max(0.0, t0 + req.arrival - time.monotonic()))
        sent = time.monotonic() - t0
        extra = {"augserve_segments": scripted_plan(req)}
        mark = mark_id(req, 0)
        trace = traces.setdefault(mark, {})
        turn, timing = await _scripted_turn(client, model, list(req.prompt_ids), extra, mark, trace)
        want = sum(s.output_len for s in req.segments)
        if len(turn.tokens) != want or timing is None:
            raise RuntimeError(f"planned {want} tokens, got {len(turn.tokens)} (timing: {timing})")
        rec.first_token_time = None if turn.first is None else turn.first - t0
        rec.num_generated_tokens = len(turn.tokens)
        rec.calls = [
            CallRecord(sent + c["start"], sent + c["end"], c["returned_tokens"], _policy(c))
            for c in timing["calls"]
        ]
        rec.finish_time = (turn.end or time.monotonic()) - t0
        rec.status = RequestStatus.FINISHED_STOPPED
    except asyncio.CancelledError:
        rec.status, rec.finish_time = RequestStatus.FINISHED_ABORTED, None
    except (httpx.HTTPError, RuntimeError) as exc:
        rec.status, rec.finish_time = RequestStatus.FINISHED_ERROR, None
        errors[req.request_id] = f"{type(exc).__name__}: {exc}"
    return rec


def _policy(call: dict[str, Any]) -> ContextPolicy | None:
    return None if call.get("policy") is None else ContextPolicy(call["policy"])


async def _scripted_turn(
    client: httpx.AsyncClient, model: str, ctx: list[int], extra: dict[str, Any], mark: str,
    trace: dict[str, float],
) -> tuple[Turn, dict[str, Any] | None]:  # fmt: skip
    """A streamed scripted completion: its generated ids and the final `augserve_timing`."""
    body = {"model": model, "prompt": ctx, "temperature": 0.0, "stream": True,
            "return_token_ids": True, **extra}  # fmt: skip
    turn, timing = Turn(), None
    async for chunk in stream_chunks(client, body, mark, trace):
        for choice in chunk.get("choices") or []:
            turn.add(choice.get("token_ids") or [])
            timing = choice.get("augserve_timing", timing)
    turn.end = time.monotonic()
    if turn.first is not None:
        trace["first"] = turn.first
    return turn, timing


async def replay_scripted(
    base_url: str, model: str, workload: Sequence[ToolRequest], deadline: float,
    transport: httpx.AsyncBaseTransport | None = None,
) -> Replay:  # fmt: skip
    """`replay` against augserve's scripted plans: the calls run on the server."""

    def start(client: httpx.AsyncClient, r: ToolRequest, t0: float, sink: Replay) -> Any:
        return run_scripted(client, model, r, t0, sink.errors, sink.traces)

    return await _replay_all(base_url, workload, deadline, transport, start)


def mark_id(req: ToolRequest, k: int) -> str:
    """The server-side marks' id of the HTTP call for segment `k` of `req` (onwards)."""
    return f"{req.request_id}/{k}"


def _record(req: ToolRequest) -> Request:
    """A request's record before it ran (aborted until it finishes)."""
    rec = Request(req.request_id, req.arrival, len(req.prompt_ids), list(req.segments))
    rec.kind = req.kind
    rec.status = RequestStatus.FINISHED_ABORTED
    return rec


def summarize(records: Sequence[Request], slo: SLOConfig, window: float) -> MetricsSummary:
    """Metrics over [0, window]: a request counts if it arrived in the window."""
    return compute_metrics(records, slo, start=0.0, end=window)


def slo_from_iteration(iteration_s: float, ttft_iterations: float = 40.0) -> SLOConfig:
    """One absolute SLO: the paper's normalized latency (10 iterations per token) and a
    TTFT of `ttft_iterations` iterations."""
    return SLOConfig.from_iteration_time(iteration_s, ttft_slo=ttft_iterations * iteration_s)


async def decode_iteration_time(
    base_url: str, model: str, tokens: int = 65, attempts: int = 3
) -> float:
    """Seconds per output token at batch 1 (streamed): the server's single-iteration time.
    A stream that arrives in one burst (buffered somewhere) times nothing: it is retried,
    and after `attempts` bursts this raises rather than return a near-zero step."""
    async with httpx.AsyncClient(base_url=base_url, timeout=300.0) as client:
        ctx = list(range(VOCAB_LOW, VOCAB_LOW + 32))
        await complete(client, model, ctx, 4, {})  # warm-up
        body = {"model": model, "prompt": ctx, "max_tokens": tokens, "temperature": 0.0,
                "ignore_eos": True, "stream": True}  # fmt: skip
        for _ in range(attempts):
            stamps: list[float] = []
            sent = time.monotonic()
            async for _ in stream_chunks(client, body):
                stamps.append(time.monotonic())
            if len(stamps) < 3:
                raise RuntimeError("could not time the decode: too few streamed chunks")
            if streamed(sent, stamps):
                return (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    raise RuntimeError(f"could not time the decode: the stream came in one burst {attempts}x")


def streamed(sent: float, stamps: Sequence[float]) -> bool:
    """Whether chunks arrived as they were made: the first-to-last span is most of the
    request's time (a buffered stream arrives all at once, after it)."""
    return stamps[-1] - stamps[0] >= 0.5 * (stamps[-1] - sent)
