"""Argument types and early checks shared by the subcommands.

Each `*_arg` function is an argparse `type=`: it returns the parsed value or
raises `argparse.ArgumentTypeError`, which argparse reports as one line naming
the flag (`augserve: error: argument --rates: ...`) before any work starts.
The file-system checks (`trace_file`, `out_dir`, ...) are in `augserve/cli/paths.py`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path

from augserve.cli.paths import one_line

Bad = argparse.ArgumentTypeError


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise Bad(f"{text!r} is not a number") from None


def float_arg(low: float, *, strict: bool) -> Callable[[str], float]:
    """A finite float `> low` (strict) or `>= low`."""
    op = ">" if strict else ">="

    def parse(text: str) -> float:
        value = _number(text)
        if not math.isfinite(value) or (value <= low if strict else value < low):
            raise Bad(f"{text!r} is not a finite number {op} {low:g}")
        return value

    parse.__name__ = f"number {op} {low:g}"
    return parse


def int_arg(low: int) -> Callable[[str], int]:
    """An integer `>= low`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise Bad(f"{text!r} is not an integer") from None
        if value < low:
            raise Bad(f"{text!r} must be >= {low}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def fraction(text: str) -> float:
    """A number in (0, 1] (`--gpu-memory-utilization`)."""
    value = _number(text)
    if not 0.0 < value <= 1.0:
        raise Bad(f"{text!r} is not a fraction in (0, 1]")
    return value


_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_UNITS |= {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def byte_size(text: str) -> int:
    """A size in bytes: `4294967296`, `4G` (10^9), `4GiB` or `4Gi` (2^30), `500M`, ..."""
    t = text.strip().lower().removesuffix("b")
    digits = t.rstrip("kmgti")
    unit = t[len(digits) :]
    try:
        value = float(digits) * _UNITS[unit]
    except (ValueError, KeyError):
        raise Bad(f"{text!r} is not a size in bytes (e.g. 4294967296, 4GiB, 500M)") from None
    if not (math.isfinite(value) and value >= 1):
        raise Bad(f"{text!r} must be at least 1 byte")
    return int(value)


def require_extra(extra: str, *modules: str) -> None:
    """Raise a one-line ValueError naming the extra when a module it installs is missing."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ValueError(
            f"this command needs the '{extra}' extra (missing: {', '.join(missing)}): "
            f"pip install 'augserve[{extra}]'"
        )


positive_float = float_arg(0.0, strict=True)
nonneg_float = float_arg(0.0, strict=False)
positive_int = int_arg(1)


def rate_list(text: str) -> list[float]:
    """Comma-separated arrival rates, each a finite number > 0 (req/s)."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise Bad(f"{text!r}: give at least one rate, e.g. 2,3,4")
    rates = []
    for item in items:
        value = _number(item)
        if not (math.isfinite(value) and value > 0):
            raise Bad(f"rate {item!r} is not a finite number > 0 (req/s)")
        rates.append(value)
    return rates


def name_list(known: Callable[[], list[str]], what: str) -> Callable[[str], list[str]]:
    """Comma-separated names, each one of `known()`; duplicates dropped."""

    def parse(text: str) -> list[str]:
        names = list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
        if not names:
            raise Bad(f"{text!r}: give at least one {what}")
        choices = known()
        for name in names:
            if name not in choices:
                raise Bad(f"unknown {what} {name!r} (choose from {', '.join(choices)})")
        return names

    parse.__name__ = f"{what} list"
    return parse


def policy_names() -> list[str]:
    from augserve.sched.policies import POLICIES

    return list(POLICIES)


def profile_names() -> list[str]:
    from augserve.profiles import list_profiles

    return list_profiles()


def profile_arg(text: str) -> str:
    """A shipped profile name or a profile JSON file (loaded here to check it)."""
    from augserve.profiles import load_profile

    try:
        load_profile(text)
    except (ValueError, OSError) as exc:
        raise Bad(one_line(exc)) from None
    return text


def predictor_arg(text: str) -> str:
    """`online`, `oracle`, `noisy:P` (0 <= P < 1) or `learned:DIR` (a directory with
    manifest.json)."""
    kind, sep, arg = text.partition(":")
    if kind == "learned" and arg:
        try:
            predictor_dir(arg)
        except Bad as exc:
            raise Bad(f"{text!r}: {exc}") from None
        return text
    if kind in ("oracle", "online") and not sep:
        return text
    if kind == "noisy":
        try:
            p = float(arg)
        except ValueError:
            p = math.nan
        if 0.0 <= p < 1.0:
            return text
        raise Bad(f"{text!r}: want noisy:P with 0 <= P < 1, e.g. noisy:0.2")
    raise Bad(f"unknown predictor {text!r} (choose from online, oracle, noisy:P, learned:DIR)")


def predictor_dir(text: str) -> str:
    """A directory written by `augserve predictor train` (it has a manifest.json)."""
    path = Path(text)
    if not path.is_dir():
        raise Bad(f"{text!r} is not a directory (train one: augserve predictor train)")
    if not (path / "manifest.json").is_file():
        raise Bad(f"{text!r} has no manifest.json (not a predictor directory)")
    return text


def arrival_arg(text: str) -> str:
    from augserve.bench.runner import arrival_cv

    try:
        arrival_cv(text)
    except ValueError:
        raise Bad(f"{text!r}: want poisson or gamma:CV with CV > 0, e.g. gamma:1.5") from None
    return text


def scheduler_override(text: str) -> tuple[str, str]:
    """`--set KEY=VALUE`: a SchedulerConfig field, checked as it is parsed."""
    from augserve.bench.runner import parse_overrides

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise Bad(f"want KEY=VALUE, got {text!r}")
    pair = (key.strip(), value.strip())
    try:
        parse_overrides([pair])
    except ValueError as exc:
        raise Bad(str(exc).removeprefix("--set: ")) from None
    return pair


def add_set_option(p: argparse._ActionsContainer, examples: str) -> None:
    """`--set KEY=VALUE` (repeatable): any SchedulerConfig field, checked as parsed."""
    p.add_argument(
        "--set",
        type=scheduler_override,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"any other SchedulerConfig field, e.g. {examples} (repeatable)",
    )
