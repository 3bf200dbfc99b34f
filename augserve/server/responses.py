"""`POST /v1/responses`: OpenAI's Responses API on the chat path (`responses_input.py`
says which subset). The answer is a `response` object whose `output` holds a
`message` item (the text) and a `function_call` item per call the client runs;
calls of the server's own tools ran inside the engine and are not items. With
`stream: true` it is the Responses event stream: `response.created`,
`response.in_progress`, the message item's `output_item.added`,
`content_part.added`, `output_text.delta`s (as the tokens come), `.done`s, each
call's `output_item.added`, `function_call_arguments.delta/.done`,
`output_item.done`, then `response.completed` (or `response.incomplete` at the
token limit, `response.failed` on an engine failure)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import Request

from augserve.server.chat import chat_inputs
from augserve.server.generation import ChoiceState
from augserve.server.pipeline import Endpoint, Ids, Inputs, Plan, outputs
from augserve.server.protocol import ChatCompletionRequest
from augserve.server.responses_input import ResponsesRequest, chat_request
from augserve.server.state import ServerState
from augserve.server.tenancy import with_tenant


class ResponsesEndpoint(Endpoint[ResponsesRequest]):
    """The Responses wire format on the chat pipeline: the request read as a chat
    request (`responses_input.py`), its first choice answered as a `response`."""

    id_prefix = "resp_"

    def bind(self, req: ResponsesRequest, http: Request) -> ResponsesRequest:
        return with_tenant(req, http)  # type: ignore[no-any-return]

    def generation_request(self, req: ResponsesRequest) -> ChatCompletionRequest:
        return chat_request(req)

    def inputs(self, state: ServerState, req: ChatCompletionRequest) -> Inputs:
        return chat_inputs(state, req)

    def body(
        self, state: ServerState, req: ResponsesRequest, plan: Plan, ids: Ids
    ) -> dict[str, Any]:
        return _final(Draft(req, ids), plan.choices[0].state, len(plan.prompts[0].ids))

    def stream(
        self, state: ServerState, req: ResponsesRequest, plan: Plan, ids: Ids
    ) -> AsyncIterator[str]:
        return _stream(state, Draft(req, ids), plan)


class Draft:
    """One response being built: its ids, the request's echo fields, and the items."""

    def __init__(self, req: ResponsesRequest, ids: Ids) -> None:
        self.req = req
        self.id = ids.id
        self.msg_id = f"msg_{uuid.uuid4().hex}"
        self.created = ids.created
        self.seq = 0

    def body(self, status: str, output: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        r = self.req
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "model": r.model,
            "status": status,
            "output": output,
            "instructions": r.instructions,
            "tools": list(r.tools or []),
            "tool_choice": r.tool_choice if r.tool_choice is not None else "auto",
            "parallel_tool_calls": True if r.parallel_tool_calls is None else r.parallel_tool_calls,
            "temperature": 1.0 if r.temperature is None else r.temperature,
            "top_p": 1.0 if r.top_p is None else r.top_p,
            "max_output_tokens": r.max_output_tokens,
            "previous_response_id": None,
            "text": r.text or {"format": {"type": "text"}},
            "truncation": r.truncation or "disabled",
            "metadata": r.metadata or {},
            "user": r.user,
            "store": False,
            "background": False,
            "error": None,
            "incomplete_details": None,
            "usage": None,
            **extra,
        }

    def event(self, kind: str, **fields: Any) -> str:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"

    def message(self, text: str, status: str) -> dict[str, Any]:
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        content = [part] if status != "in_progress" else []
        return {
            "type": "message",
            "id": self.msg_id,
            "role": "assistant",
            "status": status,
            "content": content,
        }


def _call_item(tc: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{tc['id'].removeprefix('call_')}",
        "call_id": tc["id"],
        "name": tc["function"]["name"],
        "arguments": tc["function"]["arguments"],
        "status": status,
    }


def _final(draft: Draft, cs: ChoiceState, prompt_len: int) -> dict[str, Any]:
    """The finished response object for choice `cs`."""
    output: list[dict[str, Any]] = []
    if cs.content or not cs.tool_calls:
        output.append(draft.message(cs.content, "completed"))
    output += [_call_item(tc) for tc in cs.tool_calls]
    usage = {
        "input_tokens": prompt_len,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": cs.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt_len + cs.completion_tokens,
    }
    status, extra = "completed", {}
    if cs.finish_reason == "length":
        status, extra = "incomplete", {"incomplete_details": {"reason": "max_output_tokens"}}
    elif cs.finish_reason not in ("stop", "tool_calls"):
        error = {"code": "server_error", "message": f"generation ended: {cs.finish_reason}"}
        status, extra = "failed", {"error": error}
    return draft.body(status, output, usage=usage, **extra)


async def _stream(state: ServerState, draft: Draft, plan: Plan) -> AsyncIterator[str]:
    yield draft.event("response.created", response=draft.body("in_progress", []))
    yield draft.event("response.in_progress", response=draft.body("in_progress", []))
    cs: ChoiceState = plan.choices[0].state
    ids = {"item_id": draft.msg_id, "output_index": 0}
    opened = False
    try:
        async with aclosing(outputs(state, plan, draft.id)) as outs:
            async for _, out in outs:
                delta = cs.delta(out)
                if delta and not opened:
                    opened = True
                    for event in _open_message(draft, ids):
                        yield event
                if delta:
                    yield draft.event(
                        "response.output_text.delta",
                        **ids,
                        content_index=0,
                        delta=delta,
                        logprobs=[],
                    )
    except RuntimeError as exc:
        cs.finish_reason = "error"
        yield draft.event(
            "error", code="server_error", message=f"generation failed: {exc}", param=None
        )
    final = _final(draft, cs, len(plan.prompts[0].ids))
    if final["output"] and final["output"][0]["type"] == "message" and not opened:
        for event in _open_message(draft, ids):
            yield event
    for k, item in enumerate(final["output"]):
        for event in _close_item(draft, item, k):
            yield event
    kind = {"completed": "response.completed", "incomplete": "response.incomplete"}
    yield draft.event(kind.get(final["status"], "response.failed"), response=final)


def _open_message(draft: Draft, ids: dict[str, Any]) -> list[str]:
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    return [
        draft.event(
            "response.output_item.added", output_index=0, item=draft.message("", "in_progress")
        ),
        draft.event("response.content_part.added", **ids, content_index=0, part=part),
    ]


def _close_item(draft: Draft, item: dict[str, Any], index: int) -> list[str]:
    if item["type"] == "message":
        ids = {"item_id": item["id"], "output_index": index}
        part = item["content"][0]
        return [
            draft.event(
                "response.output_text.done", **ids, content_index=0, text=part["text"], logprobs=[]
            ),
            draft.event("response.content_part.done", **ids, content_index=0, part=part),
            draft.event("response.output_item.done", output_index=index, item=item),
        ]
    ids = {"item_id": item["id"], "output_index": index}
    args = item["arguments"]
    return [
        draft.event(
            "response.output_item.added",
            output_index=index,
            item={**item, "arguments": "", "status": "in_progress"},
        ),
        draft.event("response.function_call_arguments.delta", **ids, delta=args),
        draft.event(
            "response.function_call_arguments.done", **ids, arguments=args, name=item["name"]
        ),
        draft.event("response.output_item.done", output_index=index, item=item),
    ]
