"""vLLM's small endpoints: `GET /v1/models/{id}`, `POST /tokenize`, `POST /detokenize`,
`GET /version` and `GET|POST /ping`, shaped as vLLM shapes them.

`/tokenize` takes a `prompt` (the completions endpoint's tokens: special tokens
added unless `add_special_tokens: false`) or `messages` (the chat endpoint's
prompt: the chat template with the request's tools, no special tokens added), and
answers `{"count", "max_model_len", "tokens", "token_strs"}`. Both run on a
preparation thread (`server/preparation.py`), with the chat endpoint's limits."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from pydantic import Field

from augserve import __version__
from augserve.server.chat import render, request_tools
from augserve.server.errors import APIError
from augserve.server.health import health
from augserve.server.protocol import ChatCompletionRequest, Message, ServerTools, ToolDef, _Model
from augserve.server.state import ServerState
from augserve.server.strict_json import StrictJSONRoute


class TokenizeRequest(_Model):
    model: str | None = None
    prompt: str | None = None
    messages: Annotated[list[Message], Field(min_length=1)] | None = None
    tools: list[ToolDef] | None = None
    server_tools: ServerTools = None  # as on chat: the server's tools the prompt lists
    add_special_tokens: bool | None = None  # default: True for prompt, False for messages
    add_generation_prompt: bool = True
    return_token_strs: bool = False


class DetokenizeRequest(_Model):
    model: str | None = None
    tokens: list[Annotated[int, Field(ge=0)]]


def model_card(state: ServerState, name: str) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": state.created,
        "owned_by": "augserve",
        "root": name,
        "parent": None,
        "max_model_len": state.max_model_len,
    }


def _chat_prompt(state: ServerState, req: TokenizeRequest) -> str:
    """The chat endpoint's prompt of these messages and tools (`chat.render`)."""
    assert req.messages is not None
    chat = ChatCompletionRequest(
        model=req.model or "", messages=req.messages, tools=req.tools, server_tools=req.server_tools
    )
    return render(state, chat, request_tools(state, chat), req.add_generation_prompt)


def tokenize(state: ServerState, req: TokenizeRequest) -> dict[str, Any]:
    if req.model is not None:
        state.check_model(req.model)
    if (req.prompt is None) == (req.messages is None):
        raise APIError(400, "give exactly one of 'prompt' and 'messages'", param="prompt")
    if req.prompt is not None:
        special = True if req.add_special_tokens is None else req.add_special_tokens
        state.check_text_fits(req.prompt, "prompt")
        ids = state.tokenizer.encode(req.prompt, add_special_tokens=special) if req.prompt else []
    else:
        special = bool(req.add_special_tokens)
        text = _chat_prompt(state, req)
        state.check_text_fits(text, "messages")
        ids = state.tokenizer.encode(text, add_special_tokens=special)
    strs = None
    if req.return_token_strs:
        strs = [state.tokenizer.decode([t]) for t in ids]
    return {
        "count": len(ids),
        "max_model_len": state.max_model_len,
        "tokens": list(ids),
        "token_strs": strs,
    }


def detokenize(state: ServerState, req: DetokenizeRequest) -> dict[str, Any]:
    if req.model is not None:
        state.check_model(req.model)
    vocab = int(state.engine.engine.runner.vocab_size)
    bad = [t for t in req.tokens if t >= vocab]
    if bad:
        raise APIError(
            400, f"token id {bad[0]} is outside the vocabulary (0..{vocab - 1})", param="tokens"
        )
    return {"prompt": state.tokenizer.decode(req.tokens)}


def make_router(state: ServerState, errors: dict[int | str, dict[str, Any]]) -> APIRouter:
    router = APIRouter(route_class=StrictJSONRoute)

    @router.get("/v1/models/{model_id:path}", responses=errors)
    async def get_model(model_id: str) -> JSONResponse:
        state.check_model(model_id)
        return JSONResponse(model_card(state, model_id))

    @router.post("/tokenize", responses=errors)
    async def tokenize_route(body: TokenizeRequest) -> JSONResponse:
        return JSONResponse(await state.preparer.run(tokenize, state, body))

    @router.post("/detokenize", responses=errors)
    async def detokenize_route(body: DetokenizeRequest) -> JSONResponse:
        return JSONResponse(await state.preparer.run(detokenize, state, body))

    @router.get("/version")
    async def version() -> JSONResponse:
        return JSONResponse({"version": __version__})

    async def ping() -> Response:
        """vLLM's (SageMaker's) liveness check: 200 with no body, 503 when unhealthy."""
        code, _ = health(state)
        return Response(status_code=code)

    router.add_api_route("/ping", ping, methods=["GET"], operation_id="ping_get")
    router.add_api_route("/ping", ping, methods=["POST"], operation_id="ping_post")

    return router
