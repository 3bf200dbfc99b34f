"""The FastAPI app: routes, middleware, error handlers, and the lifespan that connects
the tools (MCP servers) at start-up and drains and stops the engine at shutdown."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from augserve.engine.native_memory import Trimmer
from augserve.server import endpoints
from augserve.server.chat import ChatEndpoint
from augserve.server.completions import CompletionsEndpoint
from augserve.server.errors import install_error_handlers
from augserve.server.health import health as health_status
from augserve.server.metrics import CONTENT_TYPE
from augserve.server.middleware import APIKeyMiddleware, BodyLimitMiddleware
from augserve.server.pipeline import serve
from augserve.server.protocol import ChatCompletionRequest, CompletionRequest
from augserve.server.responses import ResponsesEndpoint
from augserve.server.responses_input import ResponsesRequest
from augserve.server.stages import ArrivalMiddleware, LoopLag
from augserve.server.state import ServerState
from augserve.server.strict_json import StrictJSONRoute
from augserve.server.tenancy import api_keys
from augserve.server.user_middleware import add_user_middleware

log = logging.getLogger("augserve.server")

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "A bad request (OpenAI error object)"},
    401: {"description": "A missing or wrong API key"},
    404: {"description": "An unknown model"},
    413: {"description": "The body is too large"},
}


async def drain(state: ServerState, grace: float) -> None:
    """Stop taking requests; give running ones `grace` seconds, then abort the rest:
    their clients get finish_reason "abort", and their answers go out before the
    connections close."""
    state.draining = True
    deadline = time.monotonic() + grace
    if state.live:
        log.info("shutdown: draining %d running request(s)", len(state.live))
    while state.live and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    if not state.live:
        return
    log.warning("shutdown: aborting %d running request(s)", len(state.live))
    for rid in list(state.live):
        state.engine.abort(rid)
    deadline = time.monotonic() + 1.0
    while state.live and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    for end in list(state.live.values()):  # no final output came from the engine
        end()
    deadline = time.monotonic() + 1.0
    while state.live and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def create_app(
    state: ServerState,
    api_key: str | Sequence[str] | None = None,
    middleware: Sequence[Any] = (),
) -> FastAPI:
    """The app; with `api_key` (one key or several: tenants) every endpoint but the
    open ones needs one of them (`server/tenancy.py`); `middleware`: the deployment's
    own, outermost (`server/user_middleware.py`)."""
    trimmer = Trimmer()  # large bodies' freed buffers back to the OS (native_memory.py)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await state.registry.start()
        state.registry.observers.append(state.metrics.observe_tool)
        start = getattr(state.engine, "start", None)
        if start is not None:  # the engine loop runs from now (a background latency fit)
            start()
        names = sorted(state.registry.tools)
        log.info("serving %s; server-side tools: %s", list(state.model_names), names or "none")
        gc.freeze()  # the start-up heap (model, tokenizer): full collections skip it
        lag = LoopLag(state.metrics.stages)
        lag.start()
        try:
            yield
        finally:
            await lag.stop()
            await drain(state, state.limits.shutdown_grace)
            await state.engine.shutdown()
            await state.registry.close()
            trimmer.close()

    app = FastAPI(
        title="augserve",
        version="0.1.0",
        lifespan=lifespan,
        description="OpenAI-compatible serving with server-side tools",
    )
    app.state.augserve = state
    app.router.route_class = StrictJSONRoute  # bad UTF-8, deep nesting: named 400s
    install_error_handlers(app)

    # the three generation endpoints: one pipeline, an adapter each (`server/pipeline.py`)
    chat, completions, responses = ChatEndpoint(), CompletionsEndpoint(), ResponsesEndpoint()

    @app.post("/v1/chat/completions", responses=ERRORS)
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Any:
        return await serve(state, chat, body, request)

    @app.post("/v1/completions", responses=ERRORS)
    async def create_completion(body: CompletionRequest, request: Request) -> Any:
        return await serve(state, completions, body, request)

    @app.post("/v1/responses", responses=ERRORS)
    async def create_response(body: ResponsesRequest, request: Request) -> Any:
        return await serve(state, responses, body, request)

    @app.get("/v1/models", responses=ERRORS)
    async def list_models() -> JSONResponse:
        data = [endpoints.model_card(state, name) for name in state.model_names]
        return JSONResponse({"object": "list", "data": data})

    @app.get("/health")
    async def health() -> JSONResponse:
        status, body = health_status(state)
        return JSONResponse(body, status_code=status)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)

    app.include_router(endpoints.make_router(state, ERRORS))
    limits = state.limits
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=limits.max_body_bytes,
        read_timeout=limits.read_timeout,
        write_timeout=limits.write_timeout,
        large_body_bytes=limits.trim_after_body_bytes,
        after_large=trimmer.request,
    )
    keys = api_keys(api_key)
    if keys:
        app.add_middleware(APIKeyMiddleware, api_keys=keys)
    app.add_middleware(ArrivalMiddleware)  # the outermost of ours: a request's clock starts here
    add_user_middleware(app, middleware)
    return app
