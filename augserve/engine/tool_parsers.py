"""Tool-call parsers for the common model formats (`ToolCallParser`s for the engine).

- `hermes` (Hermes, Qwen 2/2.5/3, the embedded default model):
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, or a JSON list of such
  objects inside one tag;
- `llama3_json` (Llama 3.1 / 3.2): the segment is a JSON object
  `{"name": ..., "parameters": {...}}` (or a list of them, or several separated by
  `;`), optionally after `<|python_tag|>`;
- `mistral` (Mistral / Mixtral instruct): `[TOOL_CALLS][{"name": ..., "arguments":
  {...}}, ...]` (every call of the list), or `[TOOL_CALLS]name[ARGS]{...}`.

No call is lost: several tags in a row, a list in one tag, several fenced blocks,
a bare JSON array. `parse(text, segment_start)` is called after every sampled token
and returns the first call unit (a call, or a `CallGroup` for a list) as soon as it
is complete, so the request pauses right after its last token. `parse_final`, once
when the output ends, returns every call left in the segment, including those that
only count at the end: an unclosed `<tool_call>{json}` / `[TOOL_CALLS][{json}` whose
JSON is whole, bare JSON objects or arrays, and ```json fences, all naming declared
tools (`tool_markup.loose_calls`; so a JSON answer is not mistaken for a call).

`content(segment, final)` is the streaming-safe view of a segment: the text a
client may see now, holding back anything that may still turn out to be (part of)
a call. It only grows as the segment grows, so a server can stream its difference.
Call markup never reaches it, complete or not, and neither does the tool-result
markup a model echoes after a tool turn (`<tool_response>...</tool_response>`).

A call whose JSON is broken comes back as an `InvalidCall` (a `ParsedCall` with an
`error`), so the server can answer the model with the error instead of dropping it.
"""

from __future__ import annotations

import json
from typing import Protocol

from augserve.engine.tool_markup import (
    InvalidCall,
    Kind,
    call_from_json,
    calls_from_json,
    complete_items,
    declared_names,
    held_prefix,
    json_object_end,
    json_value_end,
    loose_calls,
    strip_echoes,
)
from augserve.engine.tools import ParsedCall, group_calls

__all__ = [
    "TOOL_PARSERS",
    "HermesToolParser",
    "InvalidCall",
    "Llama3JsonToolParser",
    "MistralToolParser",
    "StreamingToolParser",
    "call_from_json",
    "detect_tool_parser",
    "held_prefix",
    "json_object_end",
    "json_value_end",
    "make_tool_parser",
]


class StreamingToolParser(Protocol):
    def parse(self, text: str, segment_start: int) -> ParsedCall | None: ...

    def parse_final(self, text: str, segment_start: int) -> ParsedCall | None: ...

    def content(self, segment: str, final: bool) -> str: ...


Unit = tuple[list[ParsedCall], int]  # a complete tagged unit's calls, and its end


class _Tagged:
    """A family whose calls open with a tag (`start`); its subclasses read one tagged
    unit (`_next`) and an unclosed one at the end (`_unclosed`)."""

    start = ""
    echoes: tuple[tuple[str, str], ...] = ()  # markup a model echoes: never content

    def __init__(self, tools: frozenset[str] | None = None) -> None:
        self.tools = tools or frozenset()

    def _next(self, text: str, pos: int) -> Unit | None:
        raise NotImplementedError

    def _unclosed(self, body: str) -> list[ParsedCall]:
        raise NotImplementedError

    def parse(self, text: str, segment_start: int) -> ParsedCall | None:
        unit = self._next(text, segment_start)
        if unit is None:
            return None
        calls, end = unit
        raw = text[text.find(self.start, segment_start) : end]
        return group_calls(declared_names(calls, self.tools), raw)

    def parse_final(self, text: str, segment_start: int) -> ParsedCall | None:
        """Every call left in the segment: its complete tagged units, then an unclosed
        one whose JSON is whole; without a tag, its loose calls."""
        calls: list[ParsedCall] = []
        pos = segment_start
        while (unit := self._next(text, pos)) is not None:
            calls += unit[0]
            pos = unit[1]
        i = text.find(self.start, pos)
        if i >= 0:
            body = text[i + len(self.start) :].lstrip()
            calls += [c for c in self._unclosed(body) if not isinstance(c, InvalidCall)]
        elif not calls:
            kind, calls = loose_calls(self._clean(text[segment_start:]), self.tools)
        return group_calls(declared_names(calls, self.tools), text[segment_start:])

    def _clean(self, segment: str) -> str:
        return strip_echoes(segment, self.echoes)

    def content(self, segment: str, final: bool) -> str:
        seg = self._clean(segment)
        i = seg.find(self.start)
        if i >= 0:
            return seg[:i]  # a call, complete or not, is never content
        kind, _ = loose_calls(seg, self.tools)
        if kind == "call" or (kind == "pending" and not final and seg.strip()):
            return ""
        if final:
            return seg
        markers = [self.start] + [head for head, _ in self.echoes]
        return seg[: len(seg) - max(held_prefix(seg, m) for m in markers)]


def _unclosed_json(body: str) -> list[ParsedCall]:
    """The calls of an unclosed unit's JSON: a whole object or list, else the whole
    objects at the head of an open list."""
    if not body.startswith(("{", "[")):
        return []
    end = json_value_end(body)
    if end is not None:
        return calls_from_json(body[:end], body)
    if body.startswith("["):
        return [call_from_json(item, body) for item in complete_items(body)]
    return []


class HermesToolParser(_Tagged):
    """`<tool_call>{json}</tool_call>` (or a JSON list of calls) anywhere in the segment."""

    start = "<tool_call>"
    end = "</tool_call>"
    echoes = (("<tool_response>", "</tool_response>"),)

    def _next(self, text: str, pos: int) -> Unit | None:
        i = text.find(self.start, pos)
        if i < 0:
            return None
        j = text.find(self.end, i + len(self.start))
        if j < 0:
            return None
        stop = j + len(self.end)
        return calls_from_json(text[i + len(self.start) : j].strip(), text[i:stop]), stop

    def _unclosed(self, body: str) -> list[ParsedCall]:
        return _unclosed_json(body)


class MistralToolParser(_Tagged):
    """`[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (every call of the list)
    or `[TOOL_CALLS]name[ARGS]{...}`."""

    start = "[TOOL_CALLS]"
    args = "[ARGS]"
    echoes = (("[TOOL_RESULTS]", "[/TOOL_RESULTS]"),)

    def _next(self, text: str, pos: int) -> Unit | None:
        i = text.find(self.start, pos)
        if i < 0:
            return None
        at = i + len(self.start)
        at += len(text[at:]) - len(text[at:].lstrip())
        body = text[at:]
        if body.startswith("["):
            end = json_value_end(body)
            if end is None:
                return None
            return calls_from_json(body[:end], text[i : at + end]), at + end
        k = body.find(self.args)
        if k < 0:
            return None
        obj_at = k + len(self.args)
        obj_at += len(body[obj_at:]) - len(body[obj_at:].lstrip())
        end = json_value_end(body[obj_at:]) if body[obj_at:].startswith("{") else None
        if end is None:
            return None
        stop = at + obj_at + end
        name = json.dumps(body[:k].strip())
        obj = body[obj_at : obj_at + end]
        return [
            call_from_json('{"name": ' + name + ', "arguments": ' + obj + "}", text[i:stop])
        ], stop

    def _unclosed(self, body: str) -> list[ParsedCall]:
        return _unclosed_json(body) if body.startswith("[") else []


class Llama3JsonToolParser:
    """A segment that is JSON calls with "name" and "parameters" (or "arguments"): one
    object, a list, or several separated by `;`, optionally after `<|python_tag|>`
    or inside a ```json fence. Any name counts (the whole segment is the call)."""

    python_tag = "<|python_tag|>"

    def __init__(self, tools: frozenset[str] | None = None) -> None:
        self.tools = tools or frozenset()

    def _classify(self, segment: str) -> tuple[Kind, list[ParsedCall]]:
        s = segment.lstrip().lstrip(";,").lstrip()
        if not s or self.python_tag.startswith(s):
            return "pending", []
        if s.startswith(self.python_tag):
            s = s[len(self.python_tag) :]
        return loose_calls(s, None)

    def parse(self, text: str, segment_start: int) -> ParsedCall | None:
        kind, calls = self._classify(text[segment_start:])
        if kind != "call":
            return None
        return group_calls(declared_names(calls, self.tools), text[segment_start:])

    def parse_final(self, text: str, segment_start: int) -> ParsedCall | None:
        return self.parse(text, segment_start)

    def content(self, segment: str, final: bool) -> str:
        kind, _ = self._classify(segment)
        if kind == "call" or (kind == "pending" and not final):
            return ""
        return segment


AnyToolParser = HermesToolParser | Llama3JsonToolParser | MistralToolParser
TOOL_PARSERS: dict[str, type[AnyToolParser]] = {
    "hermes": HermesToolParser,
    "llama3_json": Llama3JsonToolParser,
    "mistral": MistralToolParser,
}
PARSER_CHOICES = ("auto", *TOOL_PARSERS)  # `--tool-call-parser`: auto reads the template


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
