"""`POST /v1/completions`: text or token-id prompts, `n` choices each, JSON or SSE.
No tools here (the chat endpoint has them), except scripted tool plans
(`augserve_segments`, benchmarks: `scripted.py`). With `return_token_ids` (vLLM's
extension) each choice, and each streamed chunk, carries its generated token ids."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import replace
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from augserve.server.errors import APIError, error_body
from augserve.server.generation import (
    Choice,
    ChoiceState,
    ClientGone,
    merge_choices,
    unless_disconnected,
    with_session_header,
)
from augserve.server.input_limits import check_response_format
from augserve.server.logprobs import completion_logprobs
from augserve.server.protocol import CompletionRequest
from augserve.server.scripted import check_plan_fits, scripted_plan
from augserve.server.state import ServerState, logprobs_k, sampling_params
from augserve.server.streaming import SSEResponse, sse, usage
from augserve.server.tenancy import with_tenant

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions


def prepare(
    state: ServerState, req: CompletionRequest
) -> list[tuple[list[int], str, list[Choice]]]:
    """(prompt ids, echo text, choices) per prompt, cheapest checks first. On a
    preparation thread (`server/preparation.py`), never on the event loop."""
    state.check_accepting()
    state.check_model(req.model)
    if req.suffix:
        raise APIError(400, "'suffix' is not supported by this server", param="suffix")
    prompts = req.prompts()
    state.check_n(req.n)
    if len(prompts) * req.n > state.limits.max_n * 4:
        raise APIError(400, f"too many choices: {len(prompts)} prompts x n={req.n}", param="n")
    check_response_format(req.response_format, state.limits.prep)
    plan = scripted_plan(state, req)
    fmt = req.response_format
    if plan is not None and fmt is not None and fmt.type != "text":
        raise APIError(
            400, "response_format does not apply to scripted plans", param="response_format"
        )
    encoded = [state.encode_prompt(p, special=True) for p in prompts]
    if plan is not None:
        for ids in encoded:
            check_plan_fits(state, len(ids), plan)
    else:  # the context lengths before any grammar compiles
        limits = [
            state.max_tokens_for(req.max_tokens, len(ids), DEFAULT_MAX_TOKENS) for ids in encoded
        ]
    grammar = state.grammar_for(req.response_format)
    vocab = state.vocab_size
    out = []
    for k, (p, ids) in enumerate(zip(prompts, encoded, strict=True)):
        if plan is not None:
            params = sampling_params(req, sum(s.output_len for s in plan), 0)
            params = replace(params, ignore_eos=True)
            cs = ChoiceState(0, scripted=True)
            choices = [Choice(cs, params, segments=plan, cache_salt=req.cache_salt)]
        else:
            max_tokens = limits[k]
            choices = [
                Choice(
                    ChoiceState(k * req.n + i, stops=tuple(req.stop_list())),
                    sampling_params(req, max_tokens, i, vocab_size=vocab, grammar=grammar),
                    session_id=req.session_id,
                    cache_salt=req.cache_salt,
                )
                for i in range(req.n)
            ]
        echo = (p if isinstance(p, str) else state.tokenizer.decode(ids)) if req.echo else ""
        out.append((ids, echo, choices))
    return out


async def _run_all(state: ServerState, batches: list[Any], cid: str, sink: Any) -> None:
    """Every prompt's choices at once; the first failure cancels the rest."""

    async def one(k: int, ids: list[int], choices: list[Choice]) -> None:
        async with aclosing(merge_choices(state, ids, choices, f"{cid}-p{k}")) as outs:
            async for i, out in outs:
                await sink(choices[i].state, out)

    tasks = [asyncio.create_task(one(k, ids, ch)) for k, (ids, _, ch) in enumerate(batches)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def completion(state: ServerState, req: CompletionRequest, http: Request) -> Any:
    req = with_tenant(with_session_header(req, http), http)
    batches = await state.preparer.run(prepare, state, req)
    cid = f"cmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    if req.stream:
        gen = _stream(state, req, batches, cid, created)
        return SSEResponse(gen)

    async def sink(cs: ChoiceState, out: Any) -> None:
        cs.delta(out)

    try:
        await unless_disconnected(_run_all(state, batches, cid, sink), http.receive)
    except ClientGone:
        return JSONResponse(error_body(499, "the client closed the request"), status_code=499)
    except RuntimeError as exc:
        raise APIError(500, f"generation failed: {exc}") from None
    choices = []
    for _, echo, chs in batches:
        for c in chs:
            choice = {
                "index": c.state.index,
                "text": echo + c.state.content,
                "logprobs": _logprobs(state, c, c.state.take_logprobs(), len(echo)),
                "finish_reason": c.state.finish_reason,
            }
            choices.append(extensions(choice, c.state, req, c.state.token_ids))
    n_prompt = sum(len(ids) for ids, _, _ in batches)
    n_out = sum(c.state.completion_tokens for _, _, chs in batches for c in chs)
    body = {
        "id": cid,
        "object": "text_completion",
        "created": created,
        "model": req.model,
        "choices": choices,
        "usage": usage(n_prompt, n_out, _cached(batches)),
    }
    return JSONResponse(body)


def _logprobs(
    state: ServerState, choice: Choice, entries: list[Any], offset: int
) -> dict[str, Any] | None:
    if choice.params.logprobs is None:
        return None
    return completion_logprobs(state.tokenizer, entries, offset)


def extensions(
    choice: dict[str, Any], cs: ChoiceState, req: CompletionRequest, ids: list[int]
) -> dict[str, Any]:
    """`choice` with vLLM's `token_ids` (when asked) and a scripted plan's timings."""
    if req.return_token_ids:
        choice["token_ids"] = list(ids)
    if cs.timing is not None:
        choice["augserve_timing"] = cs.timing
    return choice


async def _stream(
    state: ServerState, req: CompletionRequest, batches: list[Any], cid: str, created: int
) -> AsyncIterator[str]:
    queue: asyncio.Queue[str | None] = asyncio.Queue()
    want_lp = logprobs_k(req) is not None

    def chunk(index: int, text: str, finish: str | None, cs: ChoiceState | None = None) -> str:
        choice: dict[str, Any] = {"index": index, "text": text, "logprobs": None}
        choice["finish_reason"] = finish
        if cs is not None:
            if want_lp:
                at = len(cs.content) - len(text)
                choice["logprobs"] = completion_logprobs(state.tokenizer, cs.take_logprobs(), at)
            choice = extensions(choice, cs, req, cs.new_ids)
        return sse(
            {
                "id": cid,
                "object": "text_completion",
                "created": created,
                "model": req.model,
                "choices": [choice],
            }
        )

    for _, echo, chs in batches:
        for c in chs:
            if echo:
                queue.put_nowait(chunk(c.state.index, echo, None))

    async def sink(cs: ChoiceState, out: Any) -> None:
        text = cs.delta(out)
        if text or out.finished or (req.return_token_ids and cs.new_ids):
            finish = cs.finish_reason if out.finished else None
            queue.put_nowait(chunk(cs.index, text, finish, cs))

    async def run() -> None:
        try:
            await _run_all(state, batches, cid, sink)
        except RuntimeError as exc:
            queue.put_nowait(sse(error_body(500, f"generation failed: {exc}")))
        finally:
            queue.put_nowait(None)

    task = asyncio.create_task(run())
    try:
        while (item := await queue.get()) is not None:
            yield item
        await task
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if req.wants_usage_chunk():
        n_prompt = sum(len(ids) for ids, _, _ in batches)
        n_out = sum(c.state.completion_tokens for _, _, chs in batches for c in chs)
        yield sse(
            {
                "id": cid,
                "object": "text_completion",
                "created": created,
                "model": req.model,
                "choices": [],
                "usage": usage(n_prompt, n_out, _cached(batches)),
            }
        )
    yield "data: [DONE]\n\n"


def _cached(batches: list[Any]) -> int:
    """Prompt tokens the prefix cache held: each prompt's once (its first sample's)."""
    return sum(chs[0].state.cached_tokens for _, _, chs in batches if chs)
