"""What every handler shares: the engine, tokenizer, chat template, tools, metrics and
limits; plus the checks every generation request goes through (model name, context
length, sampling parameters)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from augserve.engine.chat import ChatTemplate
from augserve.engine.sampling_params import GrammarSpec, SamplingParams
from augserve.server.errors import APIError
from augserve.server.input_limits import PrepLimits, check_text_fits
from augserve.server.metrics import ServerMetrics
from augserve.server.preparation import Preparer
from augserve.server.protocol import MAX_LOGPROBS, ResponseFormat, _SamplingFields
from augserve.server.tool_registry import ToolRegistry

SEED_MOD = 2**32  # the sampler mixes seeds into a 64-bit generator seed
TRIM_AFTER_BODY_BYTES = 256 * 1024  # ServerLimits' default: a body this large is followed by a trim


@dataclass(frozen=True)
class ServerLimits:
    max_body_bytes: int = 4 * 1024 * 1024
    max_tokens: int | None = None  # cap on a request's max_tokens (None: the context)
    max_n: int = 16
    shutdown_grace: float = 10.0  # seconds running requests get to finish on shutdown
    read_timeout: float = 30.0  # seconds for a request head, and for each part of a body
    write_timeout: float = 60.0  # seconds a response part may wait on a client not reading
    idle_timeout: float = 5.0  # seconds a keep-alive connection may idle between requests
    prep: PrepLimits = PrepLimits()  # request preparation: pools, schema and tool limits
    # a request body this large is followed by a malloc_trim (engine/native_memory.py)
    trim_after_body_bytes: int | None = TRIM_AFTER_BODY_BYTES

    def __post_init__(self) -> None:
        for name in ("read_timeout", "write_timeout", "idle_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_body_bytes < 1024:
            raise ValueError(f"max_body_bytes must be >= 1024, got {self.max_body_bytes}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 1 <= self.max_n <= 16:
            raise ValueError(f"max_n must be in [1, 16], got {self.max_n}")
        if self.shutdown_grace < 0:
            raise ValueError(f"shutdown_grace must be >= 0, got {self.shutdown_grace}")
        if self.trim_after_body_bytes is not None and self.trim_after_body_bytes < 1:
            raise ValueError(
                f"trim_after_body_bytes must be >= 1 or None, got {self.trim_after_body_bytes}"
            )


@dataclass
class ServerState:
    engine: Any  # AsyncLLMEngine
    template: ChatTemplate
    parser_name: str
    registry: ToolRegistry
    metrics: ServerMetrics
    model_names: tuple[str, ...]
    limits: ServerLimits = field(default_factory=ServerLimits)
    created: int = field(default_factory=lambda: int(time.time()))
    draining: bool = False
    # an extension that may plan a request itself (`pipeline.PlanHook`; installed only
    # by `scripted.install`, for benchmarks): None on the live path
    plan_hook: Callable[..., Any] | None = None
    # request id in the engine -> a function that ends its choice at once (shutdown)
    live: dict[str, Callable[[], None]] = field(default_factory=dict)
    preparer: Preparer = field(init=False)  # request preparation off the loop

    def __post_init__(self) -> None:
        self.preparer = Preparer(self.limits.prep)

    @property
    def tokenizer(self) -> Any:
        return self.engine.engine.tokenizer

    @property
    def vocab_size(self) -> int:
        return int(self.engine.engine.runner.vocab_size)

    @property
    def max_model_len(self) -> int:
        return int(self.engine.engine.max_model_len)

    # --- checks --------------------------------------------------------------------------
    def check_accepting(self) -> None:
        if self.draining:
            raise APIError(503, "the server is shutting down", code="shutting_down")

    def check_model(self, name: str) -> None:
        if name not in self.model_names:
            raise APIError(
                404,
                f"the model '{name}' does not exist; this server serves {list(self.model_names)}",
                param="model",
                code="model_not_found",
            )

    def max_tokens_for(self, requested: int | None, prompt_len: int, default: int | None) -> int:
        """The request's token limit; 400 when the prompt and it do not fit the context."""
        room = self.max_model_len - prompt_len
        if room < 1:
            raise APIError(
                400,
                f"this model's maximum context length is {self.max_model_len} "
                f"tokens, but the prompt has {prompt_len} tokens",
                param="messages",
                code="context_length_exceeded",
            )
        cap = self.limits.max_tokens
        if requested is not None and cap is not None and requested > cap:
            raise APIError(400, f"max_tokens must be <= {cap}, got {requested}", param="max_tokens")
        if requested is not None and requested > room:
            raise APIError(
                400,
                f"this model's maximum context length is {self.max_model_len} "
                f"tokens; you asked for {prompt_len + requested} ({prompt_len} in "
                f"the prompt, {requested} to generate)",
                param="max_tokens",
                code="context_length_exceeded",
            )
        if requested is not None:
            return requested
        return min(x for x in (room, cap, default) if x is not None)

    def grammar_for(self, fmt: ResponseFormat | None) -> GrammarSpec | None:
        """response_format as a compiled grammar (`check_grammar`)."""
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            spec = GrammarSpec("json_object")
            where = "response_format"
        else:
            schema = fmt.json_schema.json_schema if fmt.json_schema is not None else None
            where = "response_format.json_schema.schema"
            if schema is None:
                raise APIError(400, "response_format json_schema needs a schema", param=where)
            spec = GrammarSpec("json_schema", json.dumps(schema))
        return self.check_grammar(spec, where)

    def check_grammar(self, spec: GrammarSpec, where: str) -> GrammarSpec:
        """`spec` compiled (cached, within the time budget: `Preparer.compile`); 400
        naming `where` if it cannot compile. On a preparation thread."""
        return self.preparer.compile(self.engine.engine.grammars, spec, where)

    def check_text_fits(self, text: str, param: str) -> None:
        """400 for a text that cannot fit the context, before tokenizing it."""
        per_token = getattr(self.tokenizer, "max_token_bytes", None)
        if isinstance(per_token, int):
            check_text_fits(text, per_token, self.max_model_len, param)

    def check_n(self, n: int) -> None:
        if n > self.limits.max_n:
            raise APIError(400, f"n must be <= {self.limits.max_n}, got {n}", param="n")

    def end_markers(self) -> tuple[list[str], list[int]]:
        """The template's end-of-turn markers: token ids where they are one token,
        stop strings otherwise."""
        strings, ids = [], []
        for marker in self.template.end_markers():
            toks = self.tokenizer.encode(marker, add_special_tokens=False)
            if len(toks) == 1:
                ids.append(toks[0])
            else:
                strings.append(marker)
        return strings, ids

    def encode_prompt(
        self, prompt: str | list[int], special: bool, param: str = "prompt"
    ) -> list[int]:
        if isinstance(prompt, str):
            try:
                prompt.encode("utf-8")
            except UnicodeEncodeError as exc:  # a lone surrogate from a JSON "\\ud800"
                raise APIError(
                    400,
                    f"the text is not valid Unicode ({exc.reason} at character {exc.start})",
                    param=param,
                ) from None
            self.check_text_fits(prompt, param)
            ids = self.tokenizer.encode(prompt, add_special_tokens=special)
        else:
            ids = list(prompt)
            vocab = int(self.engine.engine.runner.vocab_size)
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise APIError(
                    400,
                    f"token id {bad[0]} is outside the vocabulary (0..{vocab - 1})",
                    param="prompt",
                )
        if not ids:
            raise APIError(400, "the prompt is empty", param="prompt")
        return list(ids)


def sampling_params(
    req: _SamplingFields,
    max_tokens: int,
    choice: int,
    extra_stop: list[str] | None = None,
    stop_token_ids: list[int] | None = None,
    vocab_size: int | None = None,
    grammar: GrammarSpec | None = None,
) -> SamplingParams:
    """The engine's parameters for choice `choice` of a request (seed + choice)."""
    bad = req.unsupported()
    if bad is not None:
        raise APIError(400, f"'{bad}' is not supported by this server", param=bad)
    seed = None if req.seed is None else (req.seed + choice) % SEED_MOD
    if req.min_tokens is not None and req.min_tokens > max_tokens:
        raise APIError(
            400,
            f"min_tokens ({req.min_tokens}) must be <= max_tokens ({max_tokens})",
            param="min_tokens",
        )
    try:
        return SamplingParams(
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            top_k=-1 if req.top_k in (None, 0) else int(req.top_k),
            seed=seed,
            max_tokens=max_tokens,
            stop=tuple(req.stop_list() + list(extra_stop or [])),
            stop_token_ids=tuple(stop_token_ids or ()),
            ignore_eos=req.ignore_eos,
            min_tokens=req.min_tokens or 0,
            logit_bias=tuple(logit_bias(req.logit_bias, vocab_size).items()),
            repetition_penalty=req.repetition_penalty or 1.0,
            presence_penalty=req.presence_penalty or 0.0,
            frequency_penalty=req.frequency_penalty or 0.0,
            min_p=req.min_p or 0.0,
            logprobs=logprobs_k(req),
            grammar=grammar,
        )
    except ValueError as exc:
        raise APIError(400, str(exc)) from None


def logit_bias(bias: dict[str, float] | None, vocab_size: int | None) -> dict[int, float]:
    """OpenAI's {"token id": bias}; 400 naming logit_bias for a key that is not an id."""
    out: dict[int, float] = {}
    for key, value in (bias or {}).items():
        try:
            tok = int(key)
        except ValueError:
            tok = -1
        if tok < 0 or (vocab_size is not None and tok >= vocab_size):
            top = f"0..{vocab_size - 1}" if vocab_size else ">= 0"
            raise APIError(
                400, f"logit_bias: {key!r} is not a token id ({top})", param="logit_bias"
            )
        out[tok] = float(value)
    return out


def logprobs_k(req: _SamplingFields) -> int | None:
    """How many top logprobs per token (0: only the sampled token's), or None.
    Chat: `logprobs: true` with `top_logprobs: k`; completions: `logprobs: k`."""
    top = getattr(req, "top_logprobs", None)
    if hasattr(req, "top_logprobs"):  # chat
        if req.logprobs is not None and not isinstance(req.logprobs, bool):
            raise APIError(400, "logprobs must be a boolean in chat", param="logprobs")
        if top is not None and not req.logprobs:
            raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        return (top or 0) if req.logprobs else None
    if req.logprobs is None or req.logprobs is False:
        return None
    k = int(req.logprobs)
    if not 0 <= k <= MAX_LOGPROBS:
        raise APIError(400, f"logprobs must be in [0, {MAX_LOGPROBS}], got {k}", param="logprobs")
    return k
