"""What the engine reports about each request, after vLLM's `RequestOutput`.

A request's *text* is everything after its prompt: the tokens it generated
and the results of the calls it made (tool results are part of its context).
Deltas (`new_token_ids`, `delta_text`) hold generated tokens only, so a
streaming client never sees a tool result as if the model had written it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from augserve.core.request import FinishReason, Request
from augserve.engine.sampler import Logprob
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tokenizer import IncrementalDetokenizer
from augserve.engine.tools import ParsedCall, ToolSession


@dataclass(frozen=True)
class ToolResult:
    """One call the engine ran for a request, and what it returned."""

    call: ParsedCall
    text: str
    error: bool
    start: float
    end: float


@dataclass(frozen=True)
class CompletionOutput:
    """One sampled continuation of a prompt (`n` of them with `SamplingParams(n=...)`)."""

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None
    num_generated_tokens: int = 0
    tool_calls: list[ParsedCall] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)


@dataclass
class RequestOutput:
    """A request's output so far (see the module docstring for text vs deltas).

    `finish_reason`: "stop" | "length" | "abort" | "error" | "tool_calls".
    `tool_calls`: with "tool_calls", the calls the client must run.
    `tool_results`: calls executed on the server so far.
    `outputs`: the vLLM-shaped view, one `CompletionOutput` per sample.
    """

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    new_token_ids: list[int] = field(default_factory=list)
    delta_text: str = ""
    segment_text: str = ""
    finished: bool = False
    finish_reason: str | None = None
    tool_calls: list[ParsedCall] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)
    num_generated_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache
    num_calls: int = 0
    request: Request | None = None
    new_logprobs: list[Logprob] = field(default_factory=list)  # of new_token_ids
    outputs: list[CompletionOutput] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.outputs:
            self.outputs = [self.completion(0)]

    def completion(self, index: int) -> CompletionOutput:
        return CompletionOutput(
            index,
            self.text,
            self.token_ids,
            self.finish_reason,
            self.num_generated_tokens,
            self.tool_calls,
            self.tool_results,
        )


@dataclass
class SeqState:
    """The engine's per-request bookkeeping beside the scheduler's `Request`."""

    request: Request
    params: SamplingParams
    detok: IncrementalDetokenizer | None
    scripted: bool
    stream: bool = True  # report an output after every step that changed the request
    tools: ToolSession | None = None
    text: str = ""  # everything after the prompt
    gen_ids: list[int] = field(default_factory=list)  # generated ids only
    gen_text: str = ""  # generated text only
    segment_start: int = 0  # where the current segment's text begins (stops, parser)
    call_scan: int = 0  # where the parser looks for the turn's next client call
    sent_ids: int = 0  # len(gen_ids) already reported
    sent_text: int = 0  # len(gen_text) already reported
    call: ParsedCall | None = None  # the call that ended the current segment
    client_calls: list[ParsedCall] = field(default_factory=list)
    results: list[ToolResult] = field(default_factory=list)
    matcher: Any = None  # the grammar matcher constraining the next tokens, or None
    after_call: Any = None  # the matcher that takes over after a forced call, or None
    logprobs: list[Logprob] = field(default_factory=list)  # per generated id (when asked)

    def add_generated(self, token_id: int, decode: bool = True) -> None:
        self.gen_ids.append(token_id)
        if decode and self.detok is not None:
            piece = self.detok.add([token_id])
            self.text += piece
            self.gen_text += piece

    def add_returned(self, ids: list[int], error: bool, now: float) -> None:
        """A call's result joins the context: a new segment starts after it, and a
        parsed call's result (its text, `error`: an error message) is kept."""
        before = len(self.text)
        if self.detok is not None:
            self.text += self.detok.add(ids)
        self.segment_start = len(self.text)
        if self.call is not None:
            calls = self.request.calls
            start = calls[-1].start if calls else now
            self.results.append(ToolResult(self.call, self.text[before:], error, start, now))
            self.call = None

    def cut_text(self, index: int) -> None:
        """Truncate the text at `index` (a stop string in the current segment)."""
        removed = len(self.text) - index
        self.text = self.text[:index]
        self.gen_text = self.gen_text[: len(self.gen_text) - removed]

    def output(self) -> RequestOutput:
        """The request's output now; the deltas since the previous call to `output`."""
        req = self.request
        assert req.token_ids is not None
        reason = req.finish_reason.value if req.finish_reason is not None else None
        out = RequestOutput(
            req.request_id,
            req.prompt_text,
            req.token_ids[: req.prompt_len],
            req.token_ids[req.prompt_len :],
            self.text,
            new_token_ids=self.gen_ids[self.sent_ids :],
            delta_text=self.gen_text[self.sent_text :],
            segment_text=self.text[self.segment_start :],
            finished=req.is_finished,
            finish_reason=reason,
            tool_calls=list(self.client_calls),
            tool_results=list(self.results),
            num_generated_tokens=req.num_generated_tokens,
            num_cached_tokens=req.num_cached_prompt_tokens,
            num_calls=len(req.calls),
            request=req,
            new_logprobs=self.logprobs[self.sent_ids :],
        )
        self.sent_ids, self.sent_text = len(self.gen_ids), len(self.gen_text)
        return out


def merge_samples(request_id: str, samples: list[RequestOutput]) -> RequestOutput:
    """One output for `n` samples of one prompt: the first's fields, every sample's
    `CompletionOutput` in `outputs` (index = sample number)."""
    head = samples[0]
    merged = RequestOutput(
        request_id,
        head.prompt,
        head.prompt_token_ids,
        head.token_ids,
        head.text,
        finished=all(s.finished for s in samples),
        finish_reason=head.finish_reason,
        tool_calls=head.tool_calls,
        tool_results=head.tool_results,
        num_generated_tokens=sum(s.num_generated_tokens for s in samples),
        num_calls=sum(s.num_calls for s in samples),
        request=head.request,
        outputs=[s.completion(i) for i, s in enumerate(samples)],
    )
    return merged


def session_output(out: RequestOutput, reason: FinishReason) -> RequestOutput:
    """`out` as the client's last output; its request stays paused as a session, so the
    output carries a finished copy of it (for the server's metrics) and counts only
    the server's calls (the last call record is the client's)."""
    req = out.request
    if req is not None:
        view = copy.copy(req)
        view.status, view.finish_reason = reason.status, reason
        view.finish_time = req.calls[-1].start  # when the turn ended
        view.calls = req.calls[:-1]
        out.request = view
    out.finished, out.finish_reason = True, reason.value
    out.num_calls = max(0, out.num_calls - 1)
    out.outputs = [out.completion(0)]
    return out
