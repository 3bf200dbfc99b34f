"""The limits on what one request may ask the server to prepare, and the cheap checks
that enforce them before any expensive work (rendering, tokenizing, compiling).

Preparing a request (`server/preparation.py`) costs time in proportion to what the
client sent: a JSON schema's grammar compiles in time that grows with its enums and
alternatives (a 200,000-value enum took minutes), a chat template renders every tool
definition, a tokenizer reads every byte. Each check here is a walk over the request
the client already sent, far cheaper than the work it guards; each failure is a 400
that names the field and the limit (the server's flag).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from augserve.engine.grammar_cache import DEFAULT_BYTES
from augserve.server.errors import APIError

# a normalizer may fold several input bytes into fewer (NFC): a safety factor on the
# bytes a vocabulary entry spells, so that the bound never rejects a prompt that fits
_NORMALIZER_SLACK = 2


@dataclass(frozen=True)
class PrepLimits:
    """Limits on request preparation (flags of `augserve serve`, docs/server.md)."""

    workers: int = 2  # threads preparing requests (templates, tokenizing, checks)
    queue: int = 64  # requests waiting for a preparation thread; 503 past it
    max_tools: int = 128  # tools one request may declare (OpenAI's limit)
    max_schema_bytes: int = 128 * 1024  # one JSON schema (a tool's parameters, a format)
    max_enum_values: int = 1024  # enum values in one schema, all its enums together
    grammar_timeout: float = 10.0  # seconds a grammar may compile; 400 past it
    grammar_workers: int = 1  # threads compiling grammars
    grammar_queue: int = 4  # compiles waiting for one; 503 past it
    grammar_cache_bytes: int = DEFAULT_BYTES  # compiled grammars kept (LRU)

    def __post_init__(self) -> None:
        for name in ("workers", "max_tools", "max_schema_bytes", "max_enum_values"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.grammar_workers < 1:
            raise ValueError(f"grammar_workers must be >= 1, got {self.grammar_workers}")
        for name in ("queue", "grammar_queue", "grammar_cache_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0 < self.grammar_timeout < float("inf"):
            raise ValueError(f"grammar_timeout must be > 0 and finite, got {self.grammar_timeout}")


def _enum_values(schema: Any) -> Iterator[int]:
    """The length of every `enum` list in a JSON value (iterative: no recursion)."""
    stack = [schema]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            enum = v.get("enum")
            if isinstance(enum, list):
                yield len(enum)
            stack.extend(x for x in v.values() if isinstance(x, dict | list))
        elif isinstance(v, list):
            stack.extend(x for x in v if isinstance(x, dict | list))


def check_schema_size(schema: Any, limits: PrepLimits, param: str) -> None:
    """A schema's bytes and enum values within the limits (400 naming `param`)."""
    size = len(json.dumps(schema, ensure_ascii=False).encode("utf-8"))
    if size > limits.max_schema_bytes:
        raise APIError(
            400,
            f"{param}: the schema is {size} bytes, over the limit of "
            f"{limits.max_schema_bytes} (--max-schema-bytes)",
            param=param,
            code="schema_too_large",
        )
    values = sum(_enum_values(schema))
    if values > limits.max_enum_values:
        raise APIError(
            400,
            f"{param}: the schema's enums hold {values} values, over the limit of "
            f"{limits.max_enum_values} (--max-enum-values)",
            param=param,
            code="schema_too_large",
        )


def check_tools(tools: list[Any] | None, limits: PrepLimits) -> None:
    """At most `max_tools` tools, each one's parameters within the schema limits."""
    tools = tools or []
    check_body_counts({"tools": tools}, limits)
    for i, tool in enumerate(tools):
        if tool.function.parameters is not None:
            check_schema_size(tool.function.parameters, limits, f"tools.{i}.function.parameters")


def check_body_counts(body: Any, limits: PrepLimits) -> None:
    """On the parsed JSON body, before it is validated into a request on the event
    loop (validating 2,000 tools took 60-220 ms there): the count of its tools."""
    tools = body.get("tools") if isinstance(body, dict) else None
    if isinstance(tools, list) and len(tools) > limits.max_tools:
        raise APIError(
            400,
            f"tools: {len(tools)} tools, over the limit of {limits.max_tools} per request "
            "(--max-tools-per-request)",
            param="tools",
            code="too_many_tools",
        )


def check_response_format(fmt: Any, limits: PrepLimits) -> None:
    if fmt is None or fmt.type != "json_schema" or fmt.json_schema is None:
        return
    schema = fmt.json_schema.json_schema
    if schema is not None:
        check_schema_size(schema, limits, "response_format.json_schema.schema")


def check_text_fits(text: str, max_token_bytes: int, max_model_len: int, param: str) -> None:
    """400 for a text too long to be a prompt of this model whatever its tokens: every
    token spells at most `max_token_bytes` bytes, so a text of more bytes than that
    times the context cannot fit (checked before tokenizing it)."""
    limit = max_token_bytes * _NORMALIZER_SLACK * max_model_len
    if len(text) * 4 <= limit:  # at most 4 bytes a character: no need to count them
        return
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > limit:
        raise APIError(
            400,
            f"this model's maximum context length is {max_model_len} tokens, and the "
            f"text ({size} bytes) is longer than any prompt of {max_model_len} tokens "
            f"can be ({limit} bytes)",
            param=param,
            code="context_length_exceeded",
        )
