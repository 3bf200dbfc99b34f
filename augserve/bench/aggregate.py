"""Bench rows averaged over seeds: one row per (backend, policy, rate, ...) point
(`augserve bench`, `augserve reproduce`; docs/bench.md)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from augserve.bench.runner import Row

_GROUP = ("backend", "policy", "rate", "arrival", "profile", "predictor", "overrides")


def aggregate(rows: Iterable[Row]) -> list[Row]:
    """One row per (policy, rate, ...): numeric columns averaged over seeds."""
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for row in rows:
        groups.setdefault(tuple(_hashable(row.get(k)) for k in _GROUP), []).append(row)
    out: list[Row] = []
    for members in groups.values():
        merged: Row = {}
        for key in members[0]:
            values = [m.get(key) for m in members]
            nums = [float(v) for v in values if _is_num(v)]  # type: ignore[arg-type]
            if key == "seed":
                merged[key] = values if len(values) > 1 else values[0]
            elif all(isinstance(v, bool) for v in values):
                merged[key] = any(values)
            elif key in _GROUP or not nums or len(nums) != len(values):
                merged[key] = values[0]
            else:
                merged[key] = sum(nums) / len(nums)
        merged["num_seeds"] = len(members)
        out.append(merged)
    return out


def _hashable(v: Any) -> Any:
    """Lists (a tuple field read back from JSON) as tuples, to group on."""
    return tuple(_hashable(x) for x in v) if isinstance(v, list | tuple) else v


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
