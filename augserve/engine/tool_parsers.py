"""Tool-call parsers for the common model formats (`ToolCallParser`s for the engine).

- `hermes` (Hermes, Qwen 2/2.5/3, the embedded default model):
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`;
- `llama3_json` (Llama 3.1 / 3.2): the segment is one JSON object
  `{"name": ..., "parameters": {...}}`, optionally after `<|python_tag|>`;
- `mistral` (Mistral / Mixtral instruct): `[TOOL_CALLS][{"name": ..., "arguments":
  {...}}]`, or `[TOOL_CALLS]name[ARGS]{...}` (newer templates).

Tolerant, as vLLM's users expect: when the output ends (`parse_final`), an unclosed
`<tool_call>{json}` / `[TOOL_CALLS][{json}` at the end, a bare JSON object, or a
```json code fence holding `{"name": <a declared tool>, "arguments": {...}}` is a
call too (bare objects and fences only for names in `tools`, so a JSON answer is not
mistaken for a call). Call markup never reaches `content`, complete or not.

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
import re
from dataclasses import dataclass
from typing import Any, Protocol

from augserve.engine.tools import ParsedCall


@dataclass(frozen=True)
class InvalidCall(ParsedCall):
    """A call the model tried to make whose body could not be read."""

    error: str = ""


class StreamingToolParser(Protocol):
    def parse(self, text: str, segment_start: int) -> ParsedCall | None: ...

    def parse_final(self, text: str, segment_start: int) -> ParsedCall | None: ...

    def content(self, segment: str, final: bool) -> str: ...


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


def json_value_end(s: str) -> int | None:
    """Index just past the object or array that opens `s` ('{' or '['), or None while
    it is still open. Brackets inside strings do not count."""
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
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


json_object_end = json_value_end

_FENCE = re.compile(r"^```(?:json)?[ \t]*\n?")


class _Base:
    """Shared tolerant pieces: loose calls (bare JSON / a ```json fence) naming one of
    `tools`, and the classification of a segment for the streaming view."""

    def __init__(self, tools: frozenset[str] | None = None) -> None:
        self.tools = tools or frozenset()

    def loose(self, segment: str) -> tuple[str, ParsedCall | None]:
        """('call', c) | ('pending', None) | ('text', None) for a segment that may be a
        bare JSON call or a fenced one."""
        s = segment.strip()
        if not s or (s.startswith("`") and len(s) < 3 and "```".startswith(s)):
            return "pending", None
        fenced = _FENCE.match(s)
        if fenced is not None:
            s = s[fenced.end() :].lstrip()
            if not s:
                return "pending", None
        if not s.startswith("{"):
            return "text", None
        end = json_value_end(s)
        if end is None:
            return "pending", None
        rest = s[end:].strip()
        if rest and not (fenced is not None and "```".startswith(rest[:3])):
            return "text", None
        call = _named_call(s[:end], segment, self.tools)
        return ("call", call) if call is not None else ("text", None)


def _named_call(body: str, raw: str, tools: frozenset[str]) -> ParsedCall | None:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or obj.get("name") not in tools:
        return None
    if "arguments" not in obj and "parameters" not in obj:
        return None
    call = call_from_json(body, raw)
    return None if isinstance(call, InvalidCall) else call


class _Tagged(_Base):
    """A family whose calls open with a tag (`start`): the streaming view of content."""

    start = ""

    def content(self, segment: str, final: bool) -> str:
        i = segment.find(self.start)
        if i >= 0:
            return segment[:i]  # a call, complete or not, is never content
        kind, _ = self.loose(segment)
        if kind == "call" or (kind == "pending" and not final and segment.strip()):
            return ""
        if final:
            return segment
        return segment[: len(segment) - held_prefix(segment, self.start)]


class HermesToolParser(_Tagged):
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

    def parse_final(self, text: str, segment_start: int) -> ParsedCall | None:
        """At the end of the output: a complete call, an unclosed one whose JSON is
        whole, or a loose call (bare JSON or a fence naming a declared tool)."""
        done = self.parse(text, segment_start)
        if done is not None:
            return done
        i = text.find(self.start, segment_start)
        if i < 0:
            kind, call = self.loose(text[segment_start:])
            return call if kind == "call" else None
        body = text[i + len(self.start) :].strip()
        end = json_value_end(body) if body.startswith("{") else None
        if end is None:
            return None
        call = call_from_json(body[:end], text[i:])
        return None if isinstance(call, InvalidCall) else call


class Llama3JsonToolParser(_Base):
    """A segment that is one JSON object with "name" and "parameters" (or "arguments"),
    optionally after `<|python_tag|>` or inside a ```json fence."""

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
        if s.startswith("`"):
            return self.loose(s)
        if not s.startswith("{"):
            return "text", None
        end = json_value_end(s)
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

    def parse_final(self, text: str, segment_start: int) -> ParsedCall | None:
        return self.parse(text, segment_start)

    def content(self, segment: str, final: bool) -> str:
        kind, _ = self._classify(segment)
        if kind == "call":
            return ""
        if kind == "pending" and not final:
            return ""
        return segment


class MistralToolParser(_Tagged):
    """`[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (the first call of the
    list is the call) or `[TOOL_CALLS]name[ARGS]{...}`."""

    start = "[TOOL_CALLS]"
    args = "[ARGS]"

    def _body(self, text: str, segment_start: int) -> tuple[int, str] | None:
        i = text.find(self.start, segment_start)
        return None if i < 0 else (i, text[i + len(self.start) :].lstrip())

    def parse(self, text: str, segment_start: int) -> ParsedCall | None:
        found = self._body(text, segment_start)
        if found is None:
            return None
        i, body = found
        if body.startswith("["):
            end = json_value_end(body)
            if end is None:
                return None
            return self._from_list(body[:end], text[i:])
        k = body.find(self.args)
        if k < 0:
            return None
        obj = body[k + len(self.args) :].lstrip()
        end = json_value_end(obj) if obj.startswith("{") else None
        if end is None:
            return None
        name = json.dumps(body[:k].strip())
        return call_from_json('{"name": ' + name + ', "arguments": ' + obj[:end] + "}", text[i:])

    @staticmethod
    def _from_list(body: str, raw: str) -> ParsedCall:
        try:
            items = json.loads(body)
        except json.JSONDecodeError as exc:
            return InvalidCall("", {}, raw, f"the tool call is not valid JSON ({exc.msg})")
        if not isinstance(items, list) or not items:
            return InvalidCall("", {}, raw, "[TOOL_CALLS] needs a list of calls")
        return call_from_json(json.dumps(items[0]), raw)

    def parse_final(self, text: str, segment_start: int) -> ParsedCall | None:
        done = self.parse(text, segment_start)
        if done is not None and not isinstance(done, InvalidCall):
            return done
        found = self._body(text, segment_start)
        if found is None:
            kind, call = self.loose(text[segment_start:])
            return call if kind == "call" else None
        i, body = found
        if body.startswith("[{"):  # an unclosed list: its whole first object
            end = json_value_end(body[1:])
            if end is not None:
                call = call_from_json(body[1 : end + 1], text[i:])
                return None if isinstance(call, InvalidCall) else call
        return None


AnyToolParser = HermesToolParser | Llama3JsonToolParser | MistralToolParser
TOOL_PARSERS: dict[str, type[AnyToolParser]] = {
    "hermes": HermesToolParser,
    "llama3_json": Llama3JsonToolParser,
    "mistral": MistralToolParser,
}


def make_tool_parser(name: str, tools: frozenset[str] | None = None) -> AnyToolParser:
    """A fresh parser by name (one per request); `tools`: the declared tool names (a
    bare JSON object or a fence is a call only when it names one of them)."""
    try:
        cls = TOOL_PARSERS[name]
    except KeyError:
        raise ValueError(
            f"tool call parser must be one of {sorted(TOOL_PARSERS)}, got {name!r}"
        ) from None
    return cls(tools)


def detect_tool_parser(template_source: str) -> str:
    """The parser that fits a chat template: Hermes for `<tool_call>`, Mistral for
    `[TOOL_CALLS]`, Llama-3 JSON for an `ipython` role or `<|python_tag|>`, else Hermes."""
    if "<tool_call>" in template_source:
        return "hermes"
    if "[TOOL_CALLS]" in template_source:
        return "mistral"
    if "<|python_tag|>" in template_source or "ipython" in template_source:
        return "llama3_json"
    return "hermes"
