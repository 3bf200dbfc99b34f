"""`POST /v1/chat/completions`: the chat wire format of the request pipeline
(`server/pipeline.py`): the messages and the tools the request is offered rendered
by the chat template; the answer a `chat.completion` (JSON) or its chunks (SSE)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from augserve.engine.chat import TemplateRaisedError
from augserve.server.errors import APIError, error_body
from augserve.server.generation import Choice, ChoiceState
from augserve.server.input_limits import check_tools
from augserve.server.logprobs import chat_logprobs
from augserve.server.pipeline import Endpoint, Ids, Inputs, Plan, outputs
from augserve.server.protocol import ChatCompletionRequest
from augserve.server.request_tools import RequestTools, trace_items
from augserve.server.state import ServerState
from augserve.server.streaming import sse


def render(
    state: ServerState, req: ChatCompletionRequest, tools: RequestTools, generation: bool = True
) -> str:
    """The chat template's prompt of `req`'s messages, listing the offered tools."""
    try:
        return state.template.render(
            [m.template_dict() for m in req.messages],
            tools=tools.template_tools(),
            add_generation_prompt=generation,
        )
    except TemplateRaisedError as exc:
        raise APIError(
            400, f"the chat template rejected the messages: {exc}", param="messages"
        ) from None
    except ValueError as exc:
        raise APIError(400, f"cannot render the messages: {exc}", param="messages") from None


def request_tools(state: ServerState, req: ChatCompletionRequest) -> RequestTools:
    """The tools `req` may use, its declared ones' sizes checked first."""
    check_tools(req.tools, state.limits.prep)
    return RequestTools(req, state.registry, state.parser_name)


def chat_inputs(state: ServerState, req: ChatCompletionRequest) -> Inputs:
    tools = request_tools(state, req)
    text = render(state, req, tools)
    return Inputs([text], special=False, param="messages", token_limit=req.token_limit, tools=tools)


class ChatEndpoint(Endpoint[ChatCompletionRequest]):
    id_prefix = "chatcmpl-"

    def inputs(self, state: ServerState, req: ChatCompletionRequest) -> Inputs:
        return chat_inputs(state, req)

    def body(
        self, state: ServerState, req: ChatCompletionRequest, plan: Plan, ids: Ids
    ) -> dict[str, Any]:
        choices = []
        for c in plan.choices:
            item: dict[str, Any] = {
                "index": c.state.index,
                "message": _message(c.state),
                "logprobs": _logprobs(state, c, c.state.take_logprobs()),
                "finish_reason": c.state.finish_reason,
            }
            if req.tool_trace:
                item["tool_trace"] = trace_items(c.state.trace)
            choices.append(item)
        head = _head(ids, req.model, "chat.completion")
        return {**head, "choices": choices, "usage": plan.usage()}

    async def stream(
        self, state: ServerState, req: ChatCompletionRequest, plan: Plan, ids: Ids
    ) -> AsyncIterator[str]:
        head = _head(ids, req.model, "chat.completion.chunk")
        started: set[int] = set()
        try:
            async with aclosing(outputs(state, plan, ids.id)) as outs:
                async for choice, out in outs:
                    cs = choice.state
                    text = cs.delta(out)
                    first = cs.index not in started
                    if first or text:
                        lp = _logprobs(state, choice, cs.take_logprobs())
                        yield sse({**head, "choices": [_delta(cs.index, text, first, lp)]})
                        started.add(cs.index)
                    if out.finished:
                        final = _final_delta(cs, req.tool_trace)
                        final["logprobs"] = _logprobs(state, choice, cs.take_logprobs())
                        yield sse({**head, "choices": [final]})
        except RuntimeError as exc:  # the engine loop failed: say so in the stream
            yield sse(error_body(500, f"generation failed: {exc}"))
        if req.wants_usage_chunk():
            yield sse({**head, "choices": [], "usage": plan.usage()})
        yield "data: [DONE]\n\n"


def _head(ids: Ids, model: str, kind: str) -> dict[str, Any]:
    return {"id": ids.id, "object": kind, "created": ids.created, "model": model}


def _message(cs: ChoiceState) -> dict[str, Any]:
    content: str | None = cs.content
    if cs.tool_calls and not (content or "").strip():
        content = None
    msg: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if cs.tool_calls:
        msg["tool_calls"] = cs.tool_calls
    return msg


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
