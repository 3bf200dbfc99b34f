"""Server-side tool calls over vLLM's `AsyncLLM`: a request paused in a call stays in vLLM.

One tool-augmented request is one resumable streaming-input session of vLLM
(`AsyncLLM.generate` over an async generator of `StreamingInput`): each turn
generates until it stops (EOS, a stop token such as a tool call's end, or
the turn's `max_tokens`); the turn's tokens go to a `ToolStep`, which runs the
call and returns the tokens of its result (the next input) or None (the
request is done). While the call runs the session waits in vLLM as
`WAITING_FOR_STREAMING_REQ`: with `AugServeScheduler` inside vLLM our policy
chooses at that pause whether it holds its KV blocks (Preserve) or releases
them to vLLM's prefix cache (Discard), as our own engine does at a call
(`augserve.integrations.bridge`, `PolicyBridge.stream_paused`); swap has no
per-request counterpart in vLLM. Limits of vLLM's streaming input: one
sequence (`n = 1`), no stop strings (stop on token ids), and the last token
sampled in a turn is dropped from the context when the next input comes
(vLLM re-samples from the new input).

`scripted_step` is the tool step of a scripted plan (benchmarks, tests): the
call of segment i lasts its `call_time` and returns `return_len` tokens.

Only where vLLM is installed (it imports vLLM, like `integrations.vllm`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from vllm import SamplingParams  # type: ignore[import-not-found,unused-ignore]
from vllm.engine.protocol import StreamingInput  # type: ignore[import-not-found,unused-ignore]
from vllm.inputs import TokensPrompt  # type: ignore[import-not-found,unused-ignore]
from vllm.outputs import RequestOutput  # type: ignore[import-not-found,unused-ignore]
from vllm.sampling_params import RequestOutputKind  # type: ignore[import-not-found,unused-ignore]

from augserve.core.request import Segment

ToolStep = Callable[[int, list[int]], Awaitable[list[int] | None]]
"""(turn index, the turn's generated token ids) -> the call's result tokens, or None."""


@dataclass
class ToolRun:
    """What one request did: its turns' tokens and its calls' durations (seconds)."""

    turns: list[list[int]] = field(default_factory=list)
    call_seconds: list[float] = field(default_factory=list)
    finished: bool = False


def turn_params(base: SamplingParams, max_tokens: int | None) -> SamplingParams:
    """A turn's parameters: `base` with its own `max_tokens`, streamed as deltas."""
    params = base.clone()
    if max_tokens is not None:
        params.max_tokens = max_tokens
    params.output_kind = RequestOutputKind.DELTA
    return params


async def generate_with_tools(
    llm: object,
    prompt: Sequence[int],
    params: SamplingParams,
    request_id: str,
    step: ToolStep,
    *,
    turn_max_tokens: Callable[[int], int | None] = lambda i: None,
    session_id: str | None = None,
    data_parallel_rank: int | None = None,
    run: ToolRun | None = None,
) -> AsyncIterator[RequestOutput]:
    """Yield the request's outputs across all its turns; `run` collects what happened.
    Leaving early aborts the session in vLLM (its KV is freed). Under data parallelism
    pass `data_parallel_rank=affinity.session_rank(session_id, size)`."""
    inputs: asyncio.Queue[StreamingInput | None] = asyncio.Queue()
    run = run if run is not None else ToolRun()

    async def stream() -> AsyncGenerator[StreamingInput, None]:
        while (item := await inputs.get()) is not None:
            yield item

    first = turn_params(params, turn_max_tokens(0))
    inputs.put_nowait(StreamingInput(TokensPrompt(prompt_token_ids=list(prompt)), first))
    run.turns.append([])
    gen = llm.generate(  # type: ignore[attr-defined]
        stream(), first, request_id, session_id=session_id, data_parallel_rank=data_parallel_rank
    )
    async for out in gen:
        done = out.outputs[0] if out.outputs else None
        if done is not None:
            run.turns[-1].extend(done.token_ids)
        yield out
        if out.finished:
            break
        if done is not None and done.finish_reason is not None:  # the turn ended
            await _next_input(inputs, run, step, params, turn_max_tokens)
    run.finished = True  # the stream closed after the last turn (vLLM ends it as an abort)


async def _next_input(
    inputs: asyncio.Queue[StreamingInput | None],
    run: ToolRun,
    step: ToolStep,
    params: SamplingParams,
    turn_max_tokens: Callable[[int], int | None],
) -> None:
    turn = len(run.turns) - 1
    loop = asyncio.get_running_loop()
    start = loop.time()
    result = await step(turn, list(run.turns[-1]))
    if result is None:
        inputs.put_nowait(None)  # no call: the session ends
        return
    run.call_seconds.append(loop.time() - start)
    # vLLM drops the turn's last sampled token when the next input comes and refuses an
    # empty input: a call that returned nothing sends that token back (the same context)
    ids = list(result) or run.turns[-1][-1:]
    run.turns.append([])
    prompt = TokensPrompt(prompt_token_ids=ids)
    inputs.put_nowait(StreamingInput(prompt, turn_params(params, turn_max_tokens(turn + 1))))


def scripted_step(
    plan: Sequence[Segment], vocab: int, seed: int = 0, time_scale: float = 1.0
) -> ToolStep:
    """The tool step of a scripted plan: segment i's call sleeps `call_time * time_scale`
    seconds and returns `return_len` random token ids below `vocab`."""
    rng = random.Random(seed)

    async def step(turn: int, _tokens: list[int]) -> list[int] | None:
        if turn >= len(plan) or plan[turn].call_time is None:
            return None
        seg = plan[turn]
        await asyncio.sleep(float(seg.call_time or 0.0) * time_scale)
        return [rng.randrange(3, vocab) for _ in range(max(1, seg.return_len))]

    return step


def plan_max_tokens(plan: Sequence[Segment]) -> Callable[[int], int | None]:
    """Turn i generates segment i's `output_len` tokens."""
    return lambda i: plan[i].output_len if i < len(plan) else 1
