"""Chat templates: render OpenAI-style messages into a prompt with the model's Jinja2
template (`tokenizer_config.json`'s `chat_template`, or `chat_template.jinja`).

    tpl = ChatTemplate.from_model_dir("models/qwen")
    prompt = tpl.render(messages, tools=tools, add_generation_prompt=True)

Templates run in Jinja2's sandbox with the helpers Hugging Face templates use
(`tojson`, `raise_exception`, `strftime_now`, `bos_token`, `eos_token`).
Messages are normalized first, as vLLM does: content given as a list of text
parts is joined into one string, and a tool call's JSON `arguments` string is
parsed into an object (a template serializes it itself).

`tool_turn(result)` wraps a tool's result the way the template renders a tool
message between two assistant turns: the model's call ends its turn, the tool
message follows, and a new assistant turn opens. The server appends that text
to a paused request's context, so generation resumes inside a well-formed chat.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

_PROBE = "augserve_probe_function"
_SENTINEL_CALL = "AUGSERVE_SENTINEL_CALL_7F3A"
_SENTINEL_RESULT = "AUGSERVE_SENTINEL_RESULT_7F3A"


class TemplateRaisedError(ValueError):
    """The template called `raise_exception` (bad message order, unsupported role, ...)."""


def _raise_exception(message: str) -> None:
    raise TemplateRaisedError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _text_of(content: Any) -> Any:
    """OpenAI content parts -> one string; strings and None pass through."""
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise ValueError(f"message content part of type {kind!r} is not supported")
        return "".join(parts)
    return content


def _normalize_call(call: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(call)
    fn = dict(out.get("function") or {})
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            fn["arguments"] = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"tool call {fn.get('name')!r}: arguments are not valid JSON ({exc.msg})"
            ) from None
    out["function"] = fn
    return out


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of `messages` with text content and tool-call arguments as objects."""
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}] must be an object with a string 'role'")
        msg = dict(m)
        msg["content"] = _text_of(msg.get("content"))
        if msg.get("tool_calls"):
            msg["tool_calls"] = [_normalize_call(c) for c in msg["tool_calls"]]
        out.append(msg)
    return out


def _token_text(value: Any) -> str:
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else ""


def _pick_template(value: Any) -> tuple[str | None, str | None]:
    """(default, tool_use) from tokenizer_config's `chat_template` (a string or a list of
    {"name", "template"})."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, list):
        named = {
            t.get("name"): t.get("template")
            for t in value
            if isinstance(t, Mapping) and isinstance(t.get("template"), str)
        }
        return named.get("default"), named.get("tool_use")
    return None, None


@dataclass(frozen=True)
class ChatTemplate:
    """A chat template and the special tokens it may refer to."""

    source: str
    bos_token: str = ""
    eos_token: str = ""
    tool_source: str | None = None  # a separate "tool_use" template, used when tools are given
    tool_format: str = "hermes"  # the call markup a generic tools prompt teaches (a parser)
    _compiled: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_model_dir(cls, path: str | Path, fallback: str | None = None) -> ChatTemplate:
        """The template of a model directory (`chat_template.jinja` wins over
        tokenizer_config's). Without one: `fallback` (e.g. CHATML_TEMPLATE), else ValueError."""
        d = Path(path)
        cfg: dict[str, Any] = {}
        cfg_path = d / "tokenizer_config.json"
        if cfg_path.is_file():
            try:
                cfg = json.loads(cfg_path.read_text())
            except json.JSONDecodeError as exc:
                raise ValueError(f"{cfg_path}: not valid JSON ({exc.msg})") from None
        default, tool_use = _pick_template(cfg.get("chat_template"))
        jinja_file = d / "chat_template.jinja"
        if jinja_file.is_file():
            default = jinja_file.read_text()
        source = default or tool_use or fallback
        if source is None:
            raise ValueError(f"{d}: no chat template (tokenizer_config.json has no chat_template)")
        return cls(
            source,
            _token_text(cfg.get("bos_token")),
            _token_text(cfg.get("eos_token")),
            tool_use if default else None,
        )

    @classmethod
    def from_file(cls, path: str | Path, model_dir: str | Path | None = None) -> ChatTemplate:
        """A template from a file (`--chat-template`), with the model's special tokens."""
        source = Path(path).read_text()
        if model_dir is None:
            return cls(source)
        base = cls.from_model_dir(model_dir, fallback=source)
        return cls(source, base.bos_token, base.eos_token)

    def _template(self, source: str) -> Any:
        tpl = self._compiled.get(source)
        if tpl is None:
            from jinja2.ext import loopcontrols
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            env = ImmutableSandboxedEnvironment(
                trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
            )
            env.filters["tojson"] = _tojson
            env.globals["raise_exception"] = _raise_exception
            env.globals["strftime_now"] = _strftime_now
            tpl = env.from_string(source)
            self._compiled[source] = tpl
        return tpl

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        """The prompt text. Raises ValueError for messages the template cannot render.
        A template that renders no tools (or no assistant tool calls) gets augserve's
        generic tools prompt instead (`tool_prompt.py`)."""
        msgs = normalize_messages(messages)
        has_calls = any(m.get("tool_calls") for m in msgs)
        generic_tools = bool(tools) and not self.renders_tools
        if generic_tools or (has_calls and not self.renders_calls):
            from augserve.engine.tool_prompt import generic_tools_messages

            offered = tools if generic_tools else None
            msgs = generic_tools_messages(msgs, offered, self.tool_format, self.renders_calls)
            tools = None if generic_tools else tools
        return self._render(msgs, tools, add_generation_prompt, **kwargs)

    def _render(
        self,
        msgs: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        add_generation_prompt: bool,
        **kwargs: Any,
    ) -> str:
        import jinja2

        source = self.tool_source if tools and self.tool_source else self.source
        try:
            return str(
                self._template(source).render(
                    messages=msgs,
                    tools=list(tools) if tools else None,
                    add_generation_prompt=add_generation_prompt,
                    bos_token=self.bos_token,
                    eos_token=self.eos_token,
                    **kwargs,
                )
            )
        except TemplateRaisedError:
            raise
        except jinja2.TemplateError as exc:
            raise ValueError(f"chat template failed: {exc}") from None
        except (TypeError, KeyError, AttributeError) as exc:  # e.g. str + None in a template
            raise ValueError(f"chat template failed: {exc}") from None

    @cached_property
    def renders_tools(self) -> bool:
        """Whether the tools it is given change the prompt (a probe tool against none);
        a template that raises on them counts as rendering them."""
        probe = [{"type": "function", "function": {"name": _PROBE, "parameters": {}}}]
        user = [{"role": "user", "content": "?"}]
        try:
            return self._render(user, probe, True) != self._render(user, None, True)
        except ValueError:
            return True

    @cached_property
    def renders_calls(self) -> bool:
        """Whether the template writes an assistant message's `tool_calls`."""
        call = {"id": "call_0", "type": "function", "function": {"name": _PROBE, "arguments": {}}}
        msgs: list[dict[str, Any]] = [
            {"role": "user", "content": "?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
        ]
        try:
            return _PROBE in self._render(msgs, None, False)
        except ValueError:
            return False

    @cached_property
    def _tool_wrap(self) -> tuple[str, str]:
        msgs = [
            {"role": "user", "content": "?"},
            {"role": "assistant", "content": _SENTINEL_CALL},
            {"role": "tool", "content": _SENTINEL_RESULT, "tool_call_id": "call_0", "name": "f"},
        ]
        try:
            text = self.render(msgs, add_generation_prompt=True)
        except ValueError:
            text = ""
        a, b = text.find(_SENTINEL_CALL), text.find(_SENTINEL_RESULT)
        if a < 0 or b < a:  # the template does not render these turns: a plain fallback
            return "\n", "\n"
        return text[a + len(_SENTINEL_CALL) : b], text[b + len(_SENTINEL_RESULT) :]

    def tool_turn(self, result: str) -> str:
        """The text that follows a model's tool call: its turn's end, the tool message
        holding `result`, and the opening of the next assistant turn."""
        head, tail = self._tool_wrap
        return f"{head}{result}{tail}"

    def end_markers(self) -> tuple[str, ...]:
        """End-of-turn markers the template writes (used as stop strings)."""
        known = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")
        return tuple(m for m in known if m in self.source)
