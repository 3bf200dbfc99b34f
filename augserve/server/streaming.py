"""Server-sent events and the usage object."""

from __future__ import annotations

import json
from typing import Any


def sse(obj: Any) -> str:
    """One SSE event holding `obj` as JSON."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
