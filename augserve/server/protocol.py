"""Request bodies of the OpenAI API (the subset augserve serves), as pydantic models.

Unknown fields are ignored, as vLLM does; known ones are typed strictly (pydantic's
strict mode: `"stream": "yes"` or `"max_tokens": true` is a 400 naming the field, and
an integer is still a valid float). Fields that change results but are not
supported (`best_of` other than `n`) are rejected with a 400 that names them,
rather than silently ignored. augserve's own extensions: `top_k`,
`ignore_eos`, `tool_trace` (return the server-side calls with the answer),
`server_tools` (which of the server's own tools the request is offered), vLLM's
`return_token_ids`, and `augserve_segments` (a scripted tool plan, benchmarks only:
see `augserve/server/scripted.py`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SEED_MAX = 2**63 - 1
FUNCTION_NAME = r"^[A-Za-z0-9_.-]{1,64}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class FunctionDef(_Model):
    name: Annotated[str, Field(pattern=FUNCTION_NAME)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolDef(_Model):
    type: Literal["function"] = "function"
    function: FunctionDef


class FunctionCall(_Model):
    name: str
    arguments: str = "{}"


class ToolCall(_Model):
    id: str = ""
    type: Literal["function"] = "function"
    function: FunctionCall


class TextPart(_Model):
    type: Literal["text"]
    text: str


class Message(_Model):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _has_content(self) -> Message:
        """Every message but an assistant's with tool calls has content, as in OpenAI."""
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            what = "or tool_calls " if self.role == "assistant" else ""
            raise ValueError(f"a {self.role} message needs content {what}(it has none)")
        return self

    def template_dict(self) -> dict[str, Any]:
        d = self.model_dump(exclude_none=True)
        if d["role"] == "developer":  # templates know "system"
            d["role"] = "system"
        d.setdefault("content", "")
        return d


class NamedFunction(_Model):
    name: str


class NamedToolChoice(_Model):
    type: Literal["function"] = "function"
    function: NamedFunction


ToolName = Annotated[str, Field(pattern=FUNCTION_NAME)]
# the server's own tools a request asks for: names, or "all" (docs/server.md)
ServerTools = Literal["all"] | Annotated[list[ToolName], Field(max_length=256)] | None


class StreamOptions(_Model):
    include_usage: bool | None = None


Stop = str | Annotated[list[str], Field(max_length=16)] | None
MAX_LOGPROBS = 20


class JsonSchemaFormat(_Model):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    name: str | None = None
    description: str | None = None
    json_schema: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Model):
    """OpenAI's `response_format`: text, any JSON object, or JSON valid against a schema."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class _SamplingFields(_Model):
    model: str
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Field(ge=-1, le=1_000_000)] | None = None
    stop: Stop = None
    seed: Annotated[int, Field(ge=-SEED_MAX - 1, le=SEED_MAX)] | None = None
    n: Annotated[int, Field(ge=1, le=16)] = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    user: str | None = None
    # the client's agent session (`extra_body={"session_id": ...}` or the X-Session-Id
    # header): a paused session of that id continues (docs/server.md, sessions)
    session_id: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    # vLLM's: a request's own prefix-cache scope, on top of its API key's
    # (`server/tenancy.py`); requests share cached prefixes only with the same salt
    cache_salt: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2.0, le=2.0)] | None = None
    logprobs: bool | int | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100.0, le=100.0)]] | None = None
    min_tokens: Annotated[int, Field(ge=0)] | None = None
    repetition_penalty: Annotated[float, Field(gt=0.0, le=10.0)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    best_of: Annotated[int, Field(ge=1)] | None = None
    response_format: ResponseFormat | None = None

    @field_validator("stop")
    @classmethod
    def _stop_non_empty(cls, v: Stop) -> Stop:
        items = [v] if isinstance(v, str) else (v or [])
        if any(not s for s in items):
            raise ValueError("stop strings must not be empty")
        return v

    def unsupported(self) -> str | None:
        """The first field set to a value augserve cannot honour, or None."""
        if self.best_of is not None and self.best_of != self.n:
            return "best_of"  # best_of == n is plain n; ranking candidates is not built
        return None

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def wants_usage_chunk(self) -> bool:
        """A final usage chunk (`choices: []`) only when asked for, as OpenAI and vLLM:
        clients read `chunk.choices[0]` on every chunk."""
        opts = self.stream_options
        return opts is not None and bool(opts.include_usage)


class ChatCompletionRequest(_SamplingFields):
    messages: Annotated[list[Message], Field(min_length=1)]
    tools: list[ToolDef] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    parallel_tool_calls: bool | None = None
    tool_trace: bool = False
    server_tools: ServerTools = None
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_LOGPROBS)] | None = None

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


Prompt = (
    Annotated[str, Field(min_length=1)]
    | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1, max_length=64)]
    | Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]
    | Annotated[
        list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]],
        Field(min_length=1, max_length=64),
    ]
)


class ScriptedSegment(BaseModel):
    """One segment of a scripted tool plan: generate `output_len` tokens, then (with
    `call_time`) pause for a call of `call_time` seconds that returns `return_len`
    filler tokens. `client_tool` (last segment only): the request then ends with
    `finish_reason: "tool_calls"`, as if the model had called that client-side tool,
    and its KV stays as a paused client session. Unknown keys are an error (a
    misspelt key would drop a call)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    output_len: Annotated[int, Field(ge=1)]
    call_time: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = None
    return_len: Annotated[int, Field(ge=0)] = 0
    client_tool: Annotated[str, Field(min_length=1, max_length=64)] | None = None


class CompletionRequest(_SamplingFields):
    prompt: Prompt
    echo: bool = False
    suffix: str | None = None
    return_token_ids: bool = False  # vLLM's extension: each choice carries its token ids
    augserve_segments: Annotated[list[ScriptedSegment], Field(min_length=1)] | None = None

    def prompts(self) -> list[str | list[int]]:
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if all(isinstance(x, int) for x in p):
            return [[x for x in p if isinstance(x, int)]]
        return [x for x in p if isinstance(x, str | list)]
