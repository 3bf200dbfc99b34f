"""Write metric rows (a list of flat dicts) as JSON and CSV."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become None; enums their value."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "value") and not isinstance(value, int | float | str):
        return value.value
    return value


def columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """All keys, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    return list(seen)


def write_json(path: str | Path, rows: Sequence[Mapping[str, Any]], **meta: Any) -> None:
    """`{"meta": {...}, "rows": [...]}`, or just the list when no meta is given."""
    clean = [{k: _clean(v) for k, v in row.items()} for row in rows]
    payload: Any = {"meta": meta, "rows": clean} if meta else clean
    Path(path).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def write_csv(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """One row per dict; the header is the union of keys; None is written empty."""
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns(rows), restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else _clean(v)) for k, v in row.items()})


def read_json_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a file written by `write_json` (with or without meta)."""
    payload = json.loads(Path(path).read_text(encoding="utf-8"))
    rows = payload["rows"] if isinstance(payload, dict) else payload
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected a list of rows")
    return rows


def write_rows(path: str | Path, rows: Sequence[Mapping[str, Any]], **meta: Any) -> None:
    """By extension: `.csv` -> CSV, anything else -> JSON."""
    if Path(path).suffix == ".csv":
        write_csv(path, rows)
    else:
        write_json(path, rows, **meta)
