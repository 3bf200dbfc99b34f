"""Markdown tables and the comparisons the report makes (geomeans, changes)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


def fmt(value: Any, spec: str = ".3f") -> str:
    """A number formatted, or `-` for None / NaN."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-" if value is None or math.isnan(value) else ("inf" if value > 0 else "-inf")
    return format(value, spec)


def pct(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.1f}%" if signed else f"{100 * value:.1f}%"


def ratio(value: float | None) -> str:
    return "-" if value is None else ("inf" if math.isinf(value) else f"{value:.2f}x")


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table (cells are str()'d; the first column left-aligned)."""
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of the finite positive values (None if there is none)."""
    xs = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


# A goodput below this (req/s) is a count of requests, not a rate to divide by: 0.05 req/s
# is 90 requests in 30 minutes. Goodput ratios over a baseline below it are left out of
# the geomeans and reported as counts (see `below_floor`).
GOODPUT_FLOOR = 0.05


def ratios(
    mine: Sequence[float | None], base: Sequence[float | None], floor: float = 0.0
) -> list[float]:
    """mine / base per pair where both exist and base >= `floor`; a zero base (with a zero
    floor) gives inf (left out of geomeans), both zero gives nothing."""
    out = []
    for m, b in zip(mine, base, strict=True):
        if m is None or b is None or (floor > 0 and b < floor):
            continue
        if b > 0:
            out.append(m / b)
        elif m > 0:
            out.append(math.inf)
    return out


def below_floor(base: Sequence[float | None], floor: float = GOODPUT_FLOOR) -> int:
    """How many baseline values are under `floor` (their ratios are left out)."""
    return sum(1 for b in base if b is not None and b < floor)


def geomean_change(mine: Sequence[float | None], base: Sequence[float | None]) -> float | None:
    """Geomean of mine / base, minus 1 (the paper's "reduces TTFT by X%")."""
    gm = geomean(ratios(mine, base))
    return None if gm is None else gm - 1.0


def section_header(title: str, settings: str, missing: int, total: int) -> str:
    """A section's heading, what it ran, and how many of its points are missing."""
    lines = [f"## {title}", "", settings]
    if missing:
        lines.append(
            f"\n**Incomplete: {missing} of {total} points have no result yet** (an interrupted "
            "run; the same command resumes it). Missing values show as `-`."
        )
    return "\n".join(lines) + "\n"
