"""`POST /v1/chat/completions`: render, check, run the choices, answer (JSON or SSE)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from augserve.engine.chat import TemplateRaisedError
from augserve.server.errors import APIError, error_body
from augserve.server.generation import (
    Choice,
    ChoiceState,
    ClientGone,
    merge_choices,
    unless_disconnected,
    with_session_header,
)
from augserve.server.input_limits import check_response_format, check_tools
from augserve.server.logprobs import chat_logprobs
from augserve.server.protocol import ChatCompletionRequest
from augserve.server.request_tools import RequestTools, trace_items
from augserve.server.state import ServerState, sampling_params
from augserve.server.streaming import SSEResponse, sse, usage
from augserve.server.tenancy import with_tenant


def _render(state: ServerState, req: ChatCompletionRequest, tools: RequestTools) -> str:
    try:
        return state.template.render(
            [m.template_dict() for m in req.messages], tools=tools.template_tools()
        )
    except TemplateRaisedError as exc:
        raise APIError(
            400, f"the chat template rejected the messages: {exc}", param="messages"
        ) from None
    except ValueError as exc:
        raise APIError(400, f"cannot render the messages: {exc}", param="messages") from None


def prepare(state: ServerState, req: ChatCompletionRequest) -> tuple[list[int], list[Choice]]:
    """The prompt and choices of a chat request, cheapest checks first: sizes and
    counts, then the template and the context length, then the grammars. On a
    preparation thread (`server/preparation.py`), never on the event loop."""
    state.check_accepting()
    state.check_model(req.model)
    state.check_n(req.n)
    check_tools(req.tools, state.limits.prep)
    check_response_format(req.response_format, state.limits.prep)
    tools = RequestTools(req, state.registry, state.parser_name)
    text = _render(state, req, tools)
    prompt = state.encode_prompt(text, special=False, param="messages")
    max_tokens = state.max_tokens_for(req.token_limit, len(prompt), None)
    if tools.grammar is not None:
        tools.grammar = state.check_grammar(tools.grammar, "tool_choice")
    grammar = state.grammar_for(req.response_format)
    stop_strings, stop_ids = state.end_markers()
    vocab = state.vocab_size
    choices = []
    for i in range(req.n):
        params = sampling_params(req, max_tokens, i, stop_strings, stop_ids, vocab, grammar)
        session, executor = tools.session(state.template)
        stops = params.stop
        cs = ChoiceState(i, session.parser if session else None, executor, stops)
        cs.forced = tools.grammar is not None
        choices.append(
            Choice(cs, params, session, session_id=req.session_id, cache_salt=req.cache_salt)
        )
    return prompt, choices


def _message(cs: ChoiceState) -> dict[str, Any]:
    content: str | None = cs.content
    if cs.tool_calls and not (content or "").strip():
        content = None
    msg: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if cs.tool_calls:
        msg["tool_calls"] = cs.tool_calls
    return msg


async def _collect(state: ServerState, prompt: list[int], choices: list[Choice], cid: str) -> None:
    async with aclosing(merge_choices(state, prompt, choices, cid)) as outs:
        async for i, out in outs:
            choices[i].state.delta(out)


async def chat_completion(state: ServerState, req: ChatCompletionRequest, http: Request) -> Any:
    req = with_tenant(with_session_header(req, http), http)
    prompt, choices = await state.preparer.run(prepare, state, req)
    cid = f"chatcmpl-{uuid.uuid4().hex}"
    created = int(time.time())
    if req.stream:
        gen = _stream(state, req, prompt, choices, cid, created)
        return SSEResponse(gen)
    try:
        await unless_disconnected(_collect(state, prompt, choices, cid), http.receive)
    except ClientGone:
        return JSONResponse(error_body(499, "the client closed the request"), status_code=499)
    except RuntimeError as exc:  # the engine loop failed
        raise APIError(500, f"generation failed: {exc}") from None
    out_choices = []
    for c in choices:
        item: dict[str, Any] = {
            "index": c.state.index,
            "message": _message(c.state),
            "logprobs": _logprobs(state, c, c.state.take_logprobs()),
            "finish_reason": c.state.finish_reason,
        }
        if req.tool_trace:
            item["tool_trace"] = trace_items(c.state.trace)
        out_choices.append(item)
    body = {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": req.model,
        "choices": out_choices,
        "usage": usage(
            len(prompt),
            sum(c.state.completion_tokens for c in choices),
            choices[0].state.cached_tokens if choices else 0,
        ),
    }
    return JSONResponse(body)


def _chunk(cid: str, created: int, model: str, choice: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [choice],
    }


async def _stream(
    state: ServerState,
    req: ChatCompletionRequest,
    prompt: list[int],
    choices: list[Choice],
    cid: str,
    created: int,
) -> AsyncIterator[str]:
    model = req.model
    started: set[int] = set()
    try:
        async with aclosing(merge_choices(state, prompt, choices, cid)) as outs:
            async for i, out in outs:
                cs = choices[i].state
                text = cs.delta(out)
                if i not in started or text:
                    lp = _logprobs(state, choices[i], cs.take_logprobs())
                    yield sse(_chunk(cid, created, model, _delta(i, text, i not in started, lp)))
                    started.add(i)
                if out.finished:
                    final = _final_delta(cs, req.tool_trace)
                    final["logprobs"] = _logprobs(state, choices[i], cs.take_logprobs())
                    yield sse(_chunk(cid, created, model, final))
    except RuntimeError as exc:  # the engine loop failed: say so in the stream
        yield sse(error_body(500, f"generation failed: {exc}"))
    if req.wants_usage_chunk():
        total = sum(c.state.completion_tokens for c in choices)
        last = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [],
            "usage": usage(len(prompt), total, choices[0].state.cached_tokens if choices else 0),
        }
        yield sse(last)
    yield "data: [DONE]\n\n"


def _delta(index: int, text: str, first: bool, logprobs: Any = None) -> dict[str, Any]:
    """A content delta; a choice's first one (sent with its first output, i.e. after
    prefill, as vLLM does, so that a client's time to first chunk is its TTFT) also
    carries the role, as OpenAI's does."""
    delta: dict[str, Any] = {"content": text}
    if first:
        delta = {"role": "assistant", "content": text, "refusal": None}
    return {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": None}


def _logprobs(state: ServerState, choice: Choice, entries: list[Any]) -> dict[str, Any] | None:
    if choice.params.logprobs is None:
        return None
    return chat_logprobs(state.tokenizer, entries)


def _final_delta(cs: ChoiceState, with_trace: bool) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if cs.tool_calls:
        delta["tool_calls"] = [{"index": k, **tc} for k, tc in enumerate(cs.tool_calls)]
    item: dict[str, Any] = {
        "index": cs.index,
        "delta": delta,
        "logprobs": None,
        "finish_reason": cs.finish_reason,
    }
    if with_trace:
        item["tool_trace"] = trace_items(cs.trace)
    return item
