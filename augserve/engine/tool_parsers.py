"""Tool-call parsers for the common model formats (`ToolCallParser`s for the engine).

- `hermes` (Hermes, Qwen 2/2.5/3, the embedded default model):
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`;
- `llama3_json` (Llama 3.1 / 3.2): the segment is one JSON object
  `{"name": ..., "parameters": {...}}`, optionally after `<|python_tag|>`.

The engine calls `parse(text, segment_start)` after every sampled token; a parser
returns a call as soon as one is complete, so the request pauses right after the
call's last token. `content(segment, final)` is the streaming-safe view of a
segment: the text a client may see now, holding back anything that may still turn
out to be (part of) a call. It only grows as the segment grows, so a server can
stream its difference.

A call whose JSON is broken comes back as an `InvalidCall` (a `ParsedCall` with an
`error`), so the server can answer the model with the error instead of dropping it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from augserve.engine.tools import ParsedCall


@dataclass(frozen=True)
class InvalidCall(ParsedCall):
    """A call the model tried to make whose body could not be read."""

    error: str = ""


class StreamingToolParser(Protocol):
    def parse(self, text: str, segment_start: int) -> ParsedCall | None: ...

    def content(self, segment: str, final: bool) -> str: ...

    def forced_prefix(self, name: str | None) -> str: ...


class ForcedCallParser:
    """`tool_choice` "required" or a named function: the prompt ends with the start of
    a call (`forced_prefix`), so the model's first segment is read as that prefix
    followed by what it generated; later segments are read as they are."""

    def __init__(self, inner: StreamingToolParser, prefix: str) -> None:
        self.inner, self.prefix = inner, prefix

    def parse(self, text: str, segment_start: int) -> ParsedCall | None:
        if segment_start == 0:
            return self.inner.parse(self.prefix + text, 0)
        return self.inner.parse(text, segment_start)

    def content(self, segment: str, final: bool) -> str:
        return self.inner.content(segment, final)

    def forced_prefix(self, name: str | None) -> str:
        return self.inner.forced_prefix(name)


def call_from_json(body: str, raw: str) -> ParsedCall:
    """A call from a JSON object {"name", "arguments" | "parameters"}; InvalidCall if not."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return InvalidCall("", {}, raw, f"the tool call is not valid JSON ({exc.msg})")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return InvalidCall("", {}, raw, 'the tool call needs a string "name"')
    name = obj["name"]
    args: Any = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return InvalidCall(name, {}, raw, f"the arguments are not valid JSON ({exc.msg})")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return InvalidCall(name, {}, raw, "the arguments must be a JSON object")
    return ParsedCall(name, args, raw)


def held_prefix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


class HermesToolParser:
    """`<tool_call>{json}</tool_call>` anywhere in the segment."""

    start = "<tool_call>"
    end = "</tool_call>"

    def _span(self, text: str, segment_start: int) -> tuple[int, int] | None:
        i = text.find(self.start, segment_start)
        if i < 0:
            return None
        j = text.find(self.end, i + len(self.start))
        return None if j < 0 else (i, j)

    def parse(self, text: str, segment_start: int) -> ParsedCall | None:
        span = self._span(text, segment_start)
        if span is None:
            return None
        i, j = span
        body = text[i + len(self.start) : j].strip()
        return call_from_json(body, text[i : j + len(self.end)])

    def forced_prefix(self, name: str | None) -> str:
        """The start of a call, to end the prompt with when a call is required
        (`name`: that tool's call, up to its arguments)."""
        if name is None:
            return self.start + "\n"
        return self.start + "\n" + '{"name": ' + json.dumps(name) + ', "arguments": '

    def content(self, segment: str, final: bool) -> str:
        i = segment.find(self.start)
        if i >= 0:
            complete = self._span(segment, 0) is not None
            return segment if final and not complete else segment[:i]
        if final:
            return segment
        return segment[: len(segment) - held_prefix(segment, self.start)]


def json_object_end(s: str) -> int | None:
    """Index just past the object that opens `s` (which starts with '{'), or None while
    it is still open. Braces inside strings do not count."""
    depth, in_str, esc = 0, False, False
    for i, ch in enumerate(s):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


class Llama3JsonToolParser:
    """A segment that is one JSON object with "name" and "parameters" (or "arguments")."""

    python_tag = "<|python_tag|>"

    def _classify(self, segment: str) -> tuple[str, ParsedCall | None]:
        """('call', call) | ('pending', None) | ('text', None)."""
        s = segment.lstrip()
        if not s or self.python_tag.startswith(s):
            return "pending", None
        if s.startswith(self.python_tag):
            s = s[len(self.python_tag) :].lstrip()
            if not s:
                return "pending", None
        if not s.startswith("{"):
            return "text", None
        end = json_object_end(s)
        if end is None:
            return "pending", None
        try:
            obj = json.loads(s[:end])
        except json.JSONDecodeError:
            return "text", None
        if not isinstance(obj, dict) or "name" not in obj:
            return "text", None
        if "parameters" not in obj and "arguments" not in obj:
            return "text", None
        return "call", call_from_json(s[:end], segment)

    def parse(self, text: str, segment_start: int) -> ParsedCall | None:
        kind, call = self._classify(text[segment_start:])
        return call if kind == "call" else None

    def forced_prefix(self, name: str | None) -> str:
        """The start of a call, to end the prompt with when a call is required."""
        if name is None:
            return '{"name": "'
        return '{"name": ' + json.dumps(name) + ', "parameters": '

    def content(self, segment: str, final: bool) -> str:
        kind, _ = self._classify(segment)
        if kind == "call":
            return ""
        if kind == "pending" and not final:
            return ""
        return segment


TOOL_PARSERS: dict[str, type[HermesToolParser] | type[Llama3JsonToolParser]] = {
    "hermes": HermesToolParser,
    "llama3_json": Llama3JsonToolParser,
}


def make_tool_parser(name: str) -> HermesToolParser | Llama3JsonToolParser:
    """A fresh parser by name (one per request)."""
    try:
        return TOOL_PARSERS[name]()
    except KeyError:
        raise ValueError(
            f"tool call parser must be one of {sorted(TOOL_PARSERS)}, got {name!r}"
        ) from None


def detect_tool_parser(template_source: str) -> str:
    """The parser that fits a chat template: Llama-3 JSON for templates with an
    `ipython` role or `<|python_tag|>`, Hermes otherwise."""
    if "<tool_call>" in template_source:
        return "hermes"
    if "<|python_tag|>" in template_source or "ipython" in template_source:
        return "llama3_json"
    return "hermes"
