"""Malformed traces fail with a ValueError naming file, place and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from augserve.workload.errors import TraceFormatError
from augserve.workload.infercept import load_infercept
from augserve.workload.jsonl import read_jsonl

GOOD = {"request_id": "a", "prompt_len": 3, "segments": [{"output_len": 2}]}


def _line(**changes: object) -> str:
    row = dict(GOOD)
    row.update(changes)
    return json.dumps({k: v for k, v in row.items() if v != "DROP"})


JSONL_CASES = [
    ("empty file", "", "top level", "(file)"),
    ("blank lines only", "\n\n", "top level", "(file)"),
    ("bad json", _line() + "\n{not json\n", "line 2", "(json)"),
    ("not an object", "[1, 2]\n", "line 1", "(json)"),
    ("missing prompt_len", _line(prompt_len="DROP"), "line 1", "prompt_len"),
    ("missing segments", _line(segments="DROP"), "line 1", "segments"),
    ("negative prompt_len", _line(prompt_len=-1), "request 'a'", "prompt_len"),
    ("zero prompt_len", _line(prompt_len=0), "request 'a'", "prompt_len"),
    ("string prompt_len", _line(prompt_len="3"), "request 'a'", "prompt_len"),
    ("bool prompt_len", _line(prompt_len=True), "request 'a'", "prompt_len"),
    ("fractional prompt_len", _line(prompt_len=2.5), "request 'a'", "prompt_len"),
    ("id not a string", _line(request_id=7), "line 1", "request_id"),
    ("empty segments", _line(segments=[]), "request 'a'", "segments"),
    ("segment missing output_len", _line(segments=[{"call_time": 1}]), "segment 0", "output_len"),
    ("negative output_len", _line(segments=[{"output_len": -4}]), "segment 0", "output_len"),
    (
        "negative call_time",
        _line(segments=[{"output_len": 1, "call_time": -1.0}]),
        "segment 0",
        "call_time",
    ),
    (
        "string call_time",
        _line(segments=[{"output_len": 1, "call_time": "1"}]),
        "segment 0",
        "call_time",
    ),
    (
        "negative return_len",
        _line(segments=[{"output_len": 1, "call_time": 1, "return_len": -2}]),
        "segment 0",
        "return_len",
    ),
    ("unknown field", _line(extra=1), "line 1", "extra"),
    ("negative arrival", _line(arrival_time=-1), "request 'a'", "arrival_time"),
    ("duplicate id", _line() + "\n" + _line(), "line 2", "request_id"),
]


@pytest.mark.parametrize(
    ("case", "text", "where", "field"), JSONL_CASES, ids=[c[0] for c in JSONL_CASES]
)
def test_jsonl_bad_input(tmp_path: Path, case: str, text: str, where: str, field: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        read_jsonl(path)
    msg = str(info.value)
    assert isinstance(info.value, TraceFormatError)
    assert str(path) in msg and where in msg and repr(field) in msg, msg


SEG = {"prompt_tokens": 5, "completion_tokens": 3}
INFERCEPT_CASES = [
    ("empty file", "", "line 1", "(json)"),
    ("bad json", '{"a": [', "line 1", "(json)"),
    ("not an object", "[]", "top level", "(json)"),
    ("no requests", "{}", "top level", "(json)"),
    ("segments not a list", json.dumps({"a": 3}), "request 'a'", "(segments)"),
    ("empty segments", json.dumps({"a": []}), "request 'a'", "(segments)"),
    ("segment not an object", json.dumps({"a": [SEG, 4]}), "request 'a' segment 1", "(segment)"),
    (
        "missing prompt",
        json.dumps({"a": [{"completion_tokens": 3}]}),
        "request 'a' segment 0",
        "prompt_tokens",
    ),
    (
        "missing completion",
        json.dumps({"a": [SEG, {"prompt_tokens": 9}]}),
        "request 'a' segment 1",
        "completion_tokens",
    ),
    (
        "string tokens",
        json.dumps({"a": [{**SEG, "completion_tokens": "3"}]}),
        "request 'a' segment 0",
        "completion_tokens",
    ),
    (
        "string api_time",
        json.dumps({"a": [{**SEG, "api_time": "x"}]}),
        "request 'a' segment 0",
        "api_time",
    ),
    (
        "negative api_time",
        json.dumps({"a": [{**SEG, "api_time": -1}]}),
        "request 'a' segment 0",
        "api_time",
    ),
    (
        "text prompt not str",
        json.dumps({"a": [{"prompt": 5, "completion": "x"}]}),
        "request 'a' segment 0",
        "prompt",
    ),
    (
        "empty prompt",
        json.dumps({"a": [{**SEG, "prompt_tokens": 0}]}),
        "request 'a' segment 0",
        "prompt_tokens",
    ),
]


@pytest.mark.parametrize(
    ("case", "text", "where", "field"), INFERCEPT_CASES, ids=[c[0] for c in INFERCEPT_CASES]
)
def test_infercept_bad_input(tmp_path: Path, case: str, text: str, where: str, field: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        load_infercept(path)
    msg = str(info.value)
    assert str(path) in msg and where in msg and repr(field) in msg, msg


def test_bad_request_after_good_ones_loads_nothing(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"a": [SEG], "b": [SEG], "c": [{"completion_tokens": 1}]}))
    with pytest.raises(ValueError, match="request 'c'"):
        load_infercept(path)


def test_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "nope.jsonl")


def test_load_trace_rejects_a_directory_and_a_binary_file(tmp_path: Path) -> None:
    from augserve.workload.registry import load_trace

    with pytest.raises(ValueError, match="is a directory, not a trace file"):
        load_trace(tmp_path)
    for name in ("x.json", "x.jsonl"):
        binary = tmp_path / name
        binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00")
        with pytest.raises(ValueError, match=f"{name}: not a text trace file"):
            load_trace(binary)
    with pytest.raises(FileNotFoundError):
        load_trace(tmp_path / "nope.jsonl")
