"""`POST /v1/completions`: the completions wire format of the request pipeline
(`server/pipeline.py`): text or token-id prompts, `n` choices each, JSON or SSE. No
tools here (the chat endpoint has them). With `return_token_ids` (vLLM's
extension) each choice, and each streamed chunk, carries its generated token ids;
`augserve_segments` (scripted tool plans, benchmarks) is served only by the
extension that `--allow-scripted-tools` installs (`scripted.py`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from augserve.server.errors import APIError, error_body
from augserve.server.generation import Choice, ChoiceState
from augserve.server.logprobs import completion_logprobs
from augserve.server.pipeline import Endpoint, Ids, Inputs, Plan, outputs
from augserve.server.protocol import CompletionRequest
from augserve.server.state import ServerState, logprobs_k
from augserve.server.streaming import sse

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions


def completion_inputs(state: ServerState, req: CompletionRequest) -> Inputs:
    if req.suffix:
        raise APIError(400, "'suffix' is not supported by this server", param="suffix")
    prompts = req.prompts()
    if len(prompts) * req.n > state.limits.max_n * 4:
        raise APIError(400, f"too many choices: {len(prompts)} prompts x n={req.n}", param="n")
    if req.augserve_segments is not None and state.plan_hook is None:
        raise APIError(
            400,
            "scripted tool plans are off on this server (start it with --allow-scripted-tools)",
            param="augserve_segments",
        )
    return Inputs(
        prompts,
        special=True,
        param="prompt",
        token_limit=req.max_tokens,
        default_max_tokens=DEFAULT_MAX_TOKENS,
        echo=req.echo,
    )


class CompletionsEndpoint(Endpoint[CompletionRequest]):
    id_prefix = "cmpl-"

    def inputs(self, state: ServerState, req: CompletionRequest) -> Inputs:
        return completion_inputs(state, req)

    def body(
        self, state: ServerState, req: CompletionRequest, plan: Plan, ids: Ids
    ) -> dict[str, Any]:
        choices = []
        for p in plan.prompts:
            for c in p.choices:
                choice = {
                    "index": c.state.index,
                    "text": p.echo + c.state.content,
                    "logprobs": _logprobs(state, c, c.state.take_logprobs(), len(p.echo)),
                    "finish_reason": c.state.finish_reason,
                }
                choices.append(extensions(choice, c.state, req, c.state.token_ids))
        return {**_head(ids, req.model), "choices": choices, "usage": plan.usage()}

    async def stream(
        self, state: ServerState, req: CompletionRequest, plan: Plan, ids: Ids
    ) -> AsyncIterator[str]:
        want_lp = logprobs_k(req) is not None
        head = _head(ids, req.model)

        def chunk(index: int, text: str, finish: str | None, cs: ChoiceState | None) -> str:
            choice: dict[str, Any] = {"index": index, "text": text, "logprobs": None}
            choice["finish_reason"] = finish
            if cs is not None:
                if want_lp:
                    at = len(cs.content) - len(text)
                    lp = completion_logprobs(state.tokenizer, cs.take_logprobs(), at)
                    choice["logprobs"] = lp
                choice = extensions(choice, cs, req, cs.new_ids)
            return sse({**head, "choices": [choice]})

        for p in plan.prompts:
            for c in p.choices if p.echo else []:
                yield chunk(c.state.index, p.echo, None, None)
        try:
            async with aclosing(outputs(state, plan, ids.id)) as outs:
                async for choice, out in outs:
                    cs = choice.state
                    text = cs.delta(out)
                    if text or out.finished or (req.return_token_ids and cs.new_ids):
                        finish = cs.finish_reason if out.finished else None
                        yield chunk(cs.index, text, finish, cs)
        except RuntimeError as exc:
            yield sse(error_body(500, f"generation failed: {exc}"))
        if req.wants_usage_chunk():
            yield sse({**head, "choices": [], "usage": plan.usage()})
        yield "data: [DONE]\n\n"


def _head(ids: Ids, model: str) -> dict[str, Any]:
    return {"id": ids.id, "object": "text_completion", "created": ids.created, "model": model}


def _logprobs(
    state: ServerState, choice: Choice, entries: list[Any], offset: int
) -> dict[str, Any] | None:
    if choice.params.logprobs is None:
        return None
    return completion_logprobs(state.tokenizer, entries, offset)


def extensions(
    choice: dict[str, Any], cs: ChoiceState, req: CompletionRequest, ids: list[int]
) -> dict[str, Any]:
    """`choice` with vLLM's `token_ids` (when asked) and an extension's fields."""
    if req.return_token_ids:
        choice["token_ids"] = list(ids)
    choice.update(cs.extra_fields())
    return choice
