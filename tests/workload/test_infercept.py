from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from augserve.workload.infercept import load_infercept
from augserve.workload.stats import trace_stats
from augserve.workload.tokenize import approx_token_count, pretokenize
from augserve.workload.trace import Trace


def test_real_trace_matches_data_readme(merged: Trace) -> None:
    s = trace_stats(merged)
    assert s["requests"] == 397
    assert s["calls_per_request_mean"] == pytest.approx(4.6, abs=0.05)
    assert s["calls_per_request_max"] == 16
    assert s["call_time_mean"] == pytest.approx(12.6, abs=0.1)
    assert s["call_time_median"] == pytest.approx(7.4, abs=0.1)
    assert s["call_share_under_1ms"] == pytest.approx(0.15, abs=0.01)
    assert s["call_share_over_20s"] == pytest.approx(0.19, abs=0.01)
    assert s["zero_time_calls"] == 15  # DECISION: zero-time calls that return tokens
    token_half = [r for r in merged if r.prompt_text is None]
    assert len(token_half) == 202
    prompts = sorted(r.prompt_len for r in token_half)
    assert (prompts[100] + prompts[101]) / 2 == pytest.approx(925, abs=5)


def test_kinds_inferred(merged: Trace) -> None:
    kinds = Counter(r.kind for r in merged)
    assert kinds == {
        "math": 98,
        "chatbot": 65,
        "tts": 65,
        "image": 65,
        "alfworld": 54,
        "qa": 49,
        None: 1,
    }
    math_calls = [s.call_time for r in merged if r.kind == "math" for s in r.segments if s.has_call]
    assert max(math_calls) < 1e-3


def test_only_first_prompt_and_text_tokenized(merged: Trace) -> None:
    req = next(r for r in merged if r.request_id == "0a84bcdff8434b23971032489f44b90a")
    assert req.prompt_len == 392 and req.prompt_text is None
    assert [s.output_len for s in req.segments] == [127, 47, 48, 82, 76]
    assert [s.return_len for s in req.segments[:4]] == [21, 23, 23, 22]
    assert not req.segments[-1].has_call
    text_req = next(r for r in merged if r.prompt_text is not None)
    assert text_req.prompt_len == approx_token_count(text_req.prompt_text or "")


def test_oneapi_file_loads(oneapi_path: Path) -> None:
    trace = load_infercept(oneapi_path)
    assert len(trace) > 0
    assert all(r.num_calls <= 1 for r in trace)


def _write(tmp_path: Path, obj: object) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(obj))
    return path


def test_rules_for_calls_and_negative_lengths(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "a": [
                {
                    "prompt_tokens": 10,
                    "completion_tokens": 5,
                    "api_time": 0.5,
                    "api_token_length": -3,
                },
                {"prompt_tokens": 99, "completion_tokens": 4, "api_time": 0, "api_token_length": 0},
                {
                    "prompt_tokens": 99,
                    "completion_tokens": -2,
                    "api_time": 0,
                    "api_token_length": 7,
                },
                {"prompt_tokens": 99, "completion_tokens": 6},
            ]
        },
    )
    (req,) = load_infercept(path)
    assert req.prompt_len == 10
    # segment 1 makes no call and is folded into segment 2; segment 2 is a
    # zero-time call returning 7 tokens; negative lengths read as 0
    assert [(s.output_len, s.call_time, s.return_len) for s in req.segments] == [
        (5, 0.5, 0),
        (4, 0.0, 7),
        (6, None, 0),
    ]


def test_text_variant(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {
            "t": [
                {
                    "prompt": "Hello there",
                    "completion": "Hi!",
                    "api_time": 2.0,
                    "api_token": "Convert this to text to speech. ",
                },
                {"prompt": "ignored running context", "completion": "Done."},
            ]
        },
    )
    (req,) = load_infercept(path)
    assert req.prompt_text == "Hello there" and req.prompt_len == 2
    assert req.kind == "tts" and req.segments[0].tool == "tts"
    assert req.segments[0].return_len == approx_token_count("Convert this to text to speech. ")


def test_pretokenizer_matches_tokenizers_bytelevel(merged_path: Path) -> None:
    pre = pytest.importorskip("tokenizers.pre_tokenizers")
    byte_level = pre.ByteLevel(add_prefix_space=False, use_regex=True)
    raw = json.loads(merged_path.read_text())
    texts = [
        s[f] for v in list(raw.values())[-60:] for s in v for f in ("prompt", "api_token") if f in s
    ]
    assert texts
    for text in texts:
        assert len(pretokenize(text)) == len(byte_level.pre_tokenize_str(text))


def test_approx_token_count_rule() -> None:
    assert approx_token_count("") == 0
    assert approx_token_count("Hello world") == 2
    assert approx_token_count(" internationalization") == 3  # 21 bytes -> ceil(21 / 8)


def test_oneapi_kinds_agree(oneapi_path: Path) -> None:
    kinds = Counter(r.kind for r in load_infercept(oneapi_path))
    assert kinds["math"] == 98 and kinds["alfworld"] == 54 and kinds["tts"] == 65
