"""Loader for INFERCEPT's augmented-LLM trace (docs/paper.md section 1).

The file is a JSON object `request_key -> [segment, ...]`. Each segment is
either the token variant `{prompt_tokens, completion_tokens, api_time?,
api_token_length?}` or the text variant `{prompt, completion, api_time?,
api_token?}`.

- Only segment 0's prompt is the prompt; later prompts (the running context)
  are ignored.
- `completion*` is generated before the call; the call lasts `api_time`
  seconds and returns `api_token_length` (or `api_token` tokenized) tokens.
- Negative lengths read as 0.
- No call: a segment without `api_time`, or with `api_time == 0` and no
  returned tokens. A no-call segment that is not the last is folded into the
  next one (its tokens are generated in one go).
- DECISION: `api_time == 0` WITH returned tokens (15 segments of
  `merged_exp_uniform.json`) is a zero-time call that returns tokens: the
  request still pauses, appends the tokens and prefills them.
- Text fields are counted with `augserve.workload.tokenize.approx_token_count`
  (GPT-2 pre-tokenizer regex, ceil(bytes / 8) per piece; no model files).

Each request gets a `kind` (augmentation type) by `classify`; see its doc.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from augserve.core.request import Segment
from augserve.workload.errors import TraceFormatError, check_float, check_int, check_str
from augserve.workload.tokenize import approx_token_count
from augserve.workload.trace import (
    KIND_CHAT,
    KIND_IMAGE,
    KIND_MATH,
    KIND_QA,
    KIND_TTS,
    KIND_VE,
    Trace,
    TraceRequest,
)

MATH_MAX_CALL_S = 1e-3  # calculator calls take ~1e-4 s
VE_MAX_CALL_S = 0.2  # ALFWorld steps take 0.05-0.11 s; Wikipedia lookups 0.27-1.03 s
TTS_MARKER = "convert this to text to speech"
IMAGE_MARKER = "generate an image"


def load_infercept(path: str | Path, name: str | None = None) -> Trace:
    """Load an INFERCEPT JSON trace; raises `TraceFormatError` (a ValueError)."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TraceFormatError(
            path, f"line {exc.lineno}", "(json)", f"bad JSON: {exc.msg}"
        ) from exc
    if not isinstance(raw, dict):
        raise TraceFormatError(path, "top level", "(json)", "expected an object key -> segments")
    if not raw:
        raise TraceFormatError(path, "top level", "(json)", "no requests in file")
    requests = [_parse_request(path, str(key), segs) for key, segs in raw.items()]
    return Trace(name=name or path.stem, requests=tuple(requests))


def _parse_request(path: Path, key: str, segs: Any) -> TraceRequest:
    where = f"request {key!r}"
    if not isinstance(segs, list) or not segs:
        raise TraceFormatError(path, where, "(segments)", "expected a non-empty list")
    for i, s in enumerate(segs):
        if not isinstance(s, dict):
            raise TraceFormatError(path, f"{where} segment {i}", "(segment)", "expected an object")
    prompt_len, prompt_text = _prompt(path, where, segs[0])
    raw_segments = [_parse_segment(path, f"{where} segment {i}", s) for i, s in enumerate(segs)]
    segments = _fold_no_call(raw_segments)
    markers = [str(s.get("api_token", "")) for s in segs if "api_time" in s]
    kind = classify(segments, markers if "prompt" in segs[0] else None)
    tool_segments = tuple(_with_tool(seg, kind, markers, i) for i, seg in enumerate(segments))
    if prompt_len <= 0:
        raise TraceFormatError(path, f"{where} segment 0", "prompt_tokens", "prompt is empty")
    return TraceRequest(key, prompt_len, tool_segments, prompt_text, kind)


def _prompt(path: Path, where: str, seg0: dict[str, Any]) -> tuple[int, str | None]:
    where0 = f"{where} segment 0"
    if "prompt_tokens" in seg0:
        return max(0, check_int(seg0["prompt_tokens"], path, where0, "prompt_tokens")), None
    if "prompt" in seg0:
        text = check_str(seg0["prompt"], path, where0, "prompt")
        return approx_token_count(text), text
    raise TraceFormatError(path, where0, "prompt_tokens", "missing (nor 'prompt' given)")


def _parse_segment(path: Path, where: str, seg: dict[str, Any]) -> Segment:
    if "completion_tokens" in seg:
        out = check_int(seg["completion_tokens"], path, where, "completion_tokens")
    elif "completion" in seg:
        out = approx_token_count(check_str(seg["completion"], path, where, "completion"))
    else:
        raise TraceFormatError(path, where, "completion_tokens", "missing (nor 'completion')")
    if "api_token_length" in seg:
        ret = check_int(seg["api_token_length"], path, where, "api_token_length")
    elif "api_token" in seg:
        ret = approx_token_count(check_str(seg["api_token"], path, where, "api_token"))
    else:
        ret = 0
    out, ret = max(0, out), max(0, ret)
    if "api_time" not in seg or seg["api_time"] is None:
        return Segment(out)
    call = check_float(seg["api_time"], path, where, "api_time")
    if call < 0:
        raise TraceFormatError(path, where, "api_time", f"must be >= 0, got {call}")
    if call == 0 and ret == 0:
        return Segment(out)
    return Segment(out, call, ret)


def _fold_no_call(segments: list[Segment]) -> list[Segment]:
    """Merge a no-call segment that is not the last into the segment after it."""
    folded: list[Segment] = []
    carry = 0
    for i, seg in enumerate(segments):
        if not seg.has_call and i < len(segments) - 1:
            carry += seg.output_len
            continue
        folded.append(Segment(seg.output_len + carry, seg.call_time, seg.return_len))
        carry = 0
    return folded


def classify(segments: list[Segment], call_texts: list[str] | None) -> str | None:
    """Heuristic augmentation type of one INFERCEPT request.

    Token-variant requests (`call_texts is None`), by the median of their
    non-zero call times: under 1 ms -> `math` (calculator, ~1e-4 s); under
    0.2 s -> `alfworld` (virtual-environment steps, 0.05-0.11 s, one duration
    repeated for every call of an episode); otherwise -> `qa` (Wikipedia
    lookups, 0.27-1.03 s).
    Text-variant requests (human, TTS and image calls overlap in duration,
    so the signature is the text of the first call): "Convert this to text to
    speech" -> `tts`, "Generate an image" -> `image`, else `chatbot` (human
    think time). A request with no call gets `None`.
    """
    times = [s.call_time for s in segments if s.call_time is not None and s.call_time > 0]
    if not times:
        return None
    if call_texts is not None:
        first = call_texts[0].strip().lower() if call_texts else ""
        if first.startswith(TTS_MARKER):
            return KIND_TTS
        if first.startswith(IMAGE_MARKER):
            return KIND_IMAGE
        return KIND_CHAT
    if statistics.median(times) < MATH_MAX_CALL_S:
        return KIND_MATH
    if statistics.median(times) < VE_MAX_CALL_S:
        return KIND_VE
    return KIND_QA


def _with_tool(seg: Segment, kind: str | None, texts: list[str], index: int) -> Segment:
    """Label the call's tool: per call for text requests, else the request's kind."""
    if not seg.has_call:
        return seg
    tool = kind
    if kind in (KIND_TTS, KIND_IMAGE, KIND_CHAT):
        text = texts[index].strip().lower() if index < len(texts) else ""
        tool = (
            KIND_TTS
            if text.startswith(TTS_MARKER)
            else KIND_IMAGE
            if text.startswith(IMAGE_MARKER)
            else "human"
        )
    return Segment(seg.output_len, seg.call_time, seg.return_len, tool)
