"""One request pipeline for /v1/chat/completions, /v1/completions and /v1/responses.

    validate -> tools offered -> render -> tokenize -> limits -> sampling parameters
    and grammars -> submit -> stream or collect -> parse calls -> format

Each endpoint is an `Endpoint`, a thin adapter for its wire format: `inputs`
validates its request and renders its prompts (the chat template with the tools
the request is offered, `request_tools.py`), `body` and `stream` format the
choices' outputs. Everything between is here, once: `plan_generation` (on a
preparation thread, `server/preparation.py`, cheapest checks first) tokenizes,
checks the context length, compiles the grammars and builds each choice; `serve`
submits the plan to the engine and collects or streams it; each `ChoiceState`
reads its outputs (visible content, parsed calls: `generation.py`).

`ServerState.plan_hook` is an extension point: when one is installed (only
`--allow-scripted-tools` installs one, `server/scripted.py`, for benchmarks) it
may plan a request itself once its prompts are tokenized; otherwise nothing of
it is on the request path. The engine is used through `generation.run_choice`
(`engine.generate`, `engine.abort`: docs/design.md).
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse

from augserve.engine.sampling_params import GrammarSpec
from augserve.server.errors import APIError, error_body
from augserve.server.generation import (
    Choice,
    ChoiceState,
    ClientGone,
    Ended,
    merge_choices,
    unless_disconnected,
    with_session_header,
)
from augserve.server.input_limits import check_response_format
from augserve.server.request_tools import RequestTools
from augserve.server.stages import StageClock, clock_of, timed_events
from augserve.server.state import ServerState, sampling_params
from augserve.server.streaming import SSEResponse, usage
from augserve.server.tenancy import with_tenant

if TYPE_CHECKING:
    from augserve.engine.outputs import RequestOutput

R = TypeVar("R")


@dataclass
class Inputs:
    """An endpoint's request, validated and rendered: its prompts, and how they read."""

    prompts: list[str | list[int]]
    special: bool  # the tokenizer adds its special tokens (a raw prompt, not a template's)
    param: str  # the field a prompt's error names
    token_limit: int | None  # the request's max_tokens
    default_max_tokens: int | None = None  # without one (None: the context's room)
    tools: RequestTools | None = None  # a chat request's tools (its template's end markers stop)
    echo: bool = False  # each prompt's text leads its choices' text


@dataclass
class PromptPlan:
    """One prompt of a request: its token ids, its choices, the text they echo."""

    ids: list[int]
    choices: list[Choice]
    echo: str = ""


@dataclass
class Plan:
    """Everything a request runs: its prompts' choices, ready for the engine."""

    prompts: list[PromptPlan]

    @property
    def choices(self) -> list[Choice]:
        return [c for p in self.prompts for c in p.choices]

    def usage(self) -> dict[str, Any]:
        """OpenAI's usage: the prefix cache's tokens counted once a prompt (its first
        choice's)."""
        prompt = sum(len(p.ids) for p in self.prompts)
        out = sum(c.state.completion_tokens for c in self.choices)
        cached = sum(p.choices[0].state.cached_tokens for p in self.prompts if p.choices)
        return usage(prompt, out, cached)


PlanHook = Callable[[ServerState, Any, Inputs, list[list[int]]], Plan | None]


@dataclass(frozen=True)
class Ids:
    """The answer's id (its engine requests' ids start with it) and creation time."""

    id: str
    created: int


class Endpoint(ABC, Generic[R]):
    """One endpoint's wire format (module doc); `R` is its request model."""

    id_prefix = ""

    def bind(self, req: R, http: Request) -> R:
        """The request with what the HTTP layer adds: the session header, the tenant."""
        return with_tenant(with_session_header(req, http), http)  # type: ignore[no-any-return]

    def generation_request(self, req: R) -> Any:
        """The request whose sampling fields the engine runs (itself by default)."""
        return req

    @abstractmethod
    def inputs(self, state: ServerState, req: Any) -> Inputs:
        """The request's prompts, tools and limits, in the endpoint's own terms."""

    @abstractmethod
    def body(self, state: ServerState, req: R, plan: Plan, ids: Ids) -> dict[str, Any]:
        """The whole (non-streamed) response body."""

    @abstractmethod
    def stream(self, state: ServerState, req: R, plan: Plan, ids: Ids) -> AsyncIterator[str]:
        """The streamed response, as SSE lines."""


async def serve(state: ServerState, endpoint: Endpoint[R], req: R, http: Request) -> Any:
    """Prepare off the loop, submit, then stream (SSE) or collect and answer (JSON)."""
    clock = clock_of(http.scope)
    clock.mark("handler")
    req = endpoint.bind(req, http)
    plan = await state.preparer.run(prepare, state, endpoint, req, clock)
    clock.mark("planned")
    for choice in plan.choices:
        choice.clock = clock
    ids = Ids(f"{endpoint.id_prefix}{uuid.uuid4().hex}", int(time.time()))
    if getattr(req, "stream", False):
        events = endpoint.stream(state, req, plan, ids)
        return SSEResponse(timed_events(events, clock, state.metrics.stages))
    gone = await collect(state, plan, ids.id, http)
    return gone or JSONResponse(endpoint.body(state, req, plan, ids))


def prepare(state: ServerState, endpoint: Endpoint[R], req: R, clock: StageClock) -> Plan:
    """On a preparation thread: the endpoint's request as a plan."""
    clock.mark("prep_start")
    plan = plan_generation(state, endpoint.generation_request(req), endpoint.inputs)
    clock.mark("prep_end")
    return plan


def plan_generation(
    state: ServerState, req: Any, inputs: Callable[[ServerState, Any], Inputs]
) -> Plan:
    """A request's plan, cheapest checks first: the server, model and counts; the
    endpoint's validation and rendering (`inputs`); tokenizing; the context length;
    then the grammars, the costliest."""
    state.check_accepting()
    state.check_model(req.model)
    state.check_n(req.n)
    check_response_format(req.response_format, state.limits.prep)
    spec = inputs(state, req)
    encoded = [state.encode_prompt(p, special=spec.special, param=spec.param) for p in spec.prompts]
    if state.plan_hook is not None:
        planned: Plan | None = state.plan_hook(state, req, spec, encoded)
        if planned is not None:
            return planned
    limits = [
        state.max_tokens_for(spec.token_limit, len(ids), spec.default_max_tokens) for ids in encoded
    ]
    if spec.tools is not None and spec.tools.grammar is not None:
        spec.tools.grammar = state.check_grammar(spec.tools.grammar, "tool_choice")
    grammar = state.grammar_for(req.response_format)
    prompts = []
    for k, ids in enumerate(encoded):
        choices = [
            _choice(state, req, spec, limits[k], (k * req.n + i, i), grammar) for i in range(req.n)
        ]
        prompts.append(PromptPlan(ids, choices, echo_text(state, spec, k, ids)))
    return Plan(prompts)


def echo_text(state: ServerState, spec: Inputs, k: int, ids: list[int]) -> str:
    """The text prompt `k` echoes (empty unless asked)."""
    if not spec.echo:
        return ""
    text = spec.prompts[k]
    return text if isinstance(text, str) else str(state.tokenizer.decode(ids))


def _choice(
    state: ServerState,
    req: Any,
    spec: Inputs,
    max_tokens: int,
    at: tuple[int, int],
    grammar: GrammarSpec | None,
) -> Choice:
    """Choice `at` = (index in the answer, index in its prompt's `n`)."""
    stop_strings, stop_ids = state.end_markers() if spec.tools is not None else ([], [])
    vocab = state.vocab_size
    params = sampling_params(req, max_tokens, at[1], stop_strings, stop_ids, vocab, grammar)
    tools = spec.tools
    session, executor = tools.session(state.template) if tools is not None else (None, None)
    parser = session.parser if session is not None else None
    cs = ChoiceState(at[0], parser, executor, params.stop)
    cs.forced = tools is not None and tools.grammar is not None
    return Choice(cs, params, session, session_id=req.session_id, cache_salt=req.cache_salt)


async def outputs(
    state: ServerState, plan: Plan, base_id: str
) -> AsyncGenerator[tuple[Choice, RequestOutput | Ended], None]:
    """Every choice's outputs as they come (closing this aborts them all)."""
    items = [(p.ids, c) for p in plan.prompts for c in p.choices]
    async with aclosing(merge_choices(state, items, base_id)) as outs:
        async for j, out in outs:
            yield items[j][1], out


async def _run(state: ServerState, plan: Plan, base_id: str) -> None:
    async with aclosing(outputs(state, plan, base_id)) as outs:
        async for choice, out in outs:
            choice.state.delta(out)


async def collect(
    state: ServerState, plan: Plan, base_id: str, http: Request
) -> JSONResponse | None:
    """Run the plan to its end, each output read into its choice's state; the 499
    answer if the client left first (its requests aborted), None otherwise."""
    try:
        await unless_disconnected(_run(state, plan, base_id), http.receive)
    except ClientGone:
        return JSONResponse(error_body(499, "the client closed the request"), status_code=499)
    except RuntimeError as exc:  # the engine loop failed
        raise APIError(500, f"generation failed: {exc}") from None
    return None
