"""Small generated traces with planted relations for the learned-predictor tests."""

from __future__ import annotations

import random
from dataclasses import dataclass

from augserve.core.request import Segment

# tool -> (prompt_len range, output_len range, call seconds, calls per request)
PLANTED = {
    "calc": ((50, 150), (20, 40), 0.01, 1),
    "search": ((400, 600), (60, 90), 1.0, 2),
    "human": ((1000, 1400), (170, 190), 20.0, 3),
}


@dataclass(frozen=True)
class FakeTraceRequest:
    """TraceRequest-shaped (request_id, prompt_len, segments, prompt_text, kind)."""

    request_id: str
    prompt_len: int
    segments: tuple[Segment, ...]
    prompt_text: str | None = None
    kind: str | None = None


def planted_trace(n: int, seed: int = 0, prefix: str = "r") -> list[FakeTraceRequest]:
    """The tool (visible through prompt length) fixes output length, call duration and
    the number of calls."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        tool = rng.choice(sorted(PLANTED))
        (p_lo, p_hi), (o_lo, o_hi), secs, n_calls = PLANTED[tool]
        segs = [
            Segment(
                rng.randint(o_lo, o_hi), secs * rng.uniform(0.95, 1.05), rng.randint(5, 30), tool
            )
            for _ in range(n_calls)
        ]
        segs.append(Segment(rng.randint(o_lo, o_hi)))
        prompt_len = rng.randint(p_lo, p_hi)
        out.append(FakeTraceRequest(f"{prefix}{i}", prompt_len, tuple(segs), None, tool))
    return out


def history_trace(n: int, seed: int = 0) -> list[FakeTraceRequest]:
    """Prompt length is noise; each request's calls all take the same time (1 s or 30 s)
    and its outputs follow from that, so segments after the first are predictable
    only from the previous call's duration."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        slow = rng.random() < 0.5
        secs, (o_lo, o_hi) = (30.0, (260, 290)) if slow else (1.0, (10, 40))
        segs = [Segment(rng.randint(o_lo, o_hi), secs, 10) for _ in range(rng.randint(2, 5))]
        segs.append(Segment(rng.randint(o_lo, o_hi)))
        out.append(FakeTraceRequest(f"h{i}", rng.randint(100, 2000), tuple(segs)))
    return out
