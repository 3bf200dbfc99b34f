"""The pieces every tool-call parser shares: reading a call out of JSON, finding where
a JSON value ends, and the "loose" calls models write without their family's markup.

A loose call is a bare JSON object `{"name": <a declared tool>, "arguments" |
"parameters": {...}}`, a JSON array of such objects, or either inside a ```json
(or plain ```) fence; several of them may follow one another. Only names in the
request's `tools` count, so a JSON answer is not mistaken for a call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from augserve.engine.tools import ParsedCall


@dataclass(frozen=True)
class InvalidCall(ParsedCall):
    """A call the model tried to make whose body could not be read."""

    error: str = ""


def call_from_obj(obj: Any, raw: str) -> ParsedCall:
    """A call from a decoded JSON object {"name", "arguments" | "parameters"}."""
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


def call_from_json(body: str, raw: str) -> ParsedCall:
    """A call from a JSON object {"name", "arguments" | "parameters"}; InvalidCall if not."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return InvalidCall("", {}, raw, f"the tool call is not valid JSON ({exc.msg})")
    return call_from_obj(obj, raw)


def calls_from_json(body: str, raw: str) -> list[ParsedCall]:
    """The calls of a JSON object or a JSON list of them (each item one call, an
    `InvalidCall` where an item is not one); one InvalidCall if the JSON is broken."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return [InvalidCall("", {}, raw, f"the tool call is not valid JSON ({exc.msg})")]
    if isinstance(obj, list):
        if not obj:
            return [InvalidCall("", {}, raw, "the list of tool calls is empty")]
        return [call_from_obj(item, raw) for item in obj]
    return [call_from_obj(obj, raw)]


def declared_names(calls: list[ParsedCall], tools: frozenset[str]) -> list[ParsedCall]:
    """Calls of `tools`' names: BFCL-style clients declare `math.gcd` as `math_gcd`
    (OpenAI's names allow no '.'), and a model that writes the original name calls the
    declared one."""
    out = []
    for call in calls:
        alt = call.name.replace(".", "_")
        if call.name not in tools and alt in tools:
            call = replace(call, name=alt)
        out.append(call)
    return out


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

_FENCE = re.compile(r"```(?:json)?[ \t]*\n?")
Kind = Literal["call", "pending", "text"]


def named_calls(body: str, raw: str, tools: frozenset[str] | None) -> list[ParsedCall]:
    """The calls of a JSON object or list when every one names a tool of `tools` (any
    name when `tools` is None) and carries its "arguments" or "parameters"; else []."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return []
    items = obj if isinstance(obj, list) else [obj]
    if not items:
        return []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return []
        name = item["name"]
        if tools is not None and name not in tools and name.replace(".", "_") not in tools:
            return []
        if "arguments" not in item and "parameters" not in item:
            return []
    calls = [call_from_obj(item, raw) for item in items]
    if any(isinstance(c, InvalidCall) for c in calls):
        return []
    return calls if tools is None else declared_names(calls, tools)


def _unit(s: str, tools: frozenset[str] | None) -> tuple[Kind, list[ParsedCall], int]:
    """The first loose unit of `s` (which starts at a non-space): its kind, its calls
    and where it ends."""
    if s.startswith("`") and len(s) < 3 and "```".startswith(s):
        return "pending", [], len(s)
    fence = _FENCE.match(s)
    start = 0
    if fence is not None and "json".startswith(s[fence.end() :]):
        return "pending", [], len(s)  # "```js": the info string is still coming
    if fence is not None:
        start = fence.end() + len(s[fence.end() :]) - len(s[fence.end() :].lstrip())
        if start == len(s):
            return "pending", [], len(s)
    if s[start] not in "{[":
        return "text", [], 0
    inner = s[start + 1 :].lstrip()[:1]
    if inner and inner != ("{" if s[start] == "[" else '"'):
        return "text", [], 0  # not a call's opening: '[1,' / '{x' / '[see' ...
    end = json_value_end(s[start:])
    if end is None:
        return "pending", [], len(s)
    calls = named_calls(s[start : start + end], s, tools)
    if not calls:
        return "text", [], 0
    stop = start + end
    if fence is not None:
        tail = s[stop:].lstrip()
        if tail.startswith("```"):
            stop = len(s) - len(tail) + 3
        elif "```".startswith(tail):  # the fence closes at the end, or not yet
            stop = len(s)
        else:
            return "text", [], 0
    return "call", [replace(c, raw=s[:stop]) for c in calls], stop


def complete_items(s: str) -> list[str]:
    """The whole JSON objects at the head of a list that is still open (`s` starts
    with '['): '[{"a": 1}, {"b"' -> ['{"a": 1}']."""
    items: list[str] = []
    pos = 1
    while True:
        rest = s[pos:].lstrip().lstrip(",").lstrip()
        if not rest.startswith("{"):
            return items
        end = json_value_end(rest)
        if end is None:
            return items
        items.append(rest[:end])
        pos = len(s) - len(rest) + end


def strip_echoes(segment: str, echoes: tuple[tuple[str, str], ...]) -> str:
    """`segment` without the markup a model echoes after a tool turn (e.g. its own
    `<tool_response>...</tool_response>`): whole blocks and the blanks after them go,
    an unclosed block goes with everything after it."""
    for head, tail in echoes:
        while (i := segment.find(head)) >= 0:
            j = segment.find(tail, i + len(head))
            if j < 0:
                segment = segment[:i]
                break
            segment = segment[:i] + segment[j + len(tail) :].lstrip()
    return segment


def loose_calls(segment: str, tools: frozenset[str] | None) -> tuple[Kind, list[ParsedCall]]:
    """('call', calls) when the segment opens with loose calls naming `tools` (any
    name for None): the calls of every unit that follows, separated by blanks, `;`
    or `,`; ('pending', []) while its opening may still become one; ('text', []) when
    it is not one."""
    calls: list[ParsedCall] = []
    pos = 0
    while True:
        rest = segment[pos:].lstrip()
        if calls:
            rest = rest.lstrip(";,").lstrip()
        if not rest:
            return ("call", calls) if calls else ("pending", [])
        kind, found, end = _unit(rest, tools)
        if kind != "call":
            return ("call", calls) if calls else (kind, [])
        calls += found
        pos = len(segment) - len(rest) + end
