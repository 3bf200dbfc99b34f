"""Errors for malformed trace files: a ValueError that names where and what."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


class TraceFormatError(ValueError):
    """A trace file is malformed. The message names the file, the place, the field."""

    def __init__(self, path: str | Path, where: str, field: str, problem: str) -> None:
        self.path = str(path)
        self.where = where
        self.field = field
        super().__init__(f"{self.path}: {where}: field {field!r}: {problem}")


def check_int(value: Any, path: str | Path, where: str, field: str) -> int:
    """`value` as an int; floats with an integral value are accepted, bools are not."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceFormatError(path, where, field, f"expected an integer, got {value!r}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise TraceFormatError(path, where, field, f"expected an integer, got {value!r}")
    return int(value)


def check_float(value: Any, path: str | Path, where: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceFormatError(path, where, field, f"expected a number, got {value!r}")
    if not math.isfinite(value):
        raise TraceFormatError(path, where, field, f"expected a finite number, got {value!r}")
    return float(value)


def check_str(value: Any, path: str | Path, where: str, field: str) -> str:
    if not isinstance(value, str):
        raise TraceFormatError(path, where, field, f"expected a string, got {value!r}")
    return value
