"""Sections, the context they run in, and the results they read.

A `Section` lists the `BenchPoint`s it needs (`points`), may prepare files
first in this process (`prepare`: the learned predictor of figure 8), and
renders its part of the report from the finished points (`render`). Sections
share points freely: the run computes each distinct point once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from augserve.bench.aggregate import aggregate
from augserve.bench.reproduce.spec import INFERCEPT, Scale, point, profiles_for
from augserve.bench.runner import BenchPoint, Row


@dataclass(frozen=True)
class Context:
    """Where a run writes and what it runs: scale, output folder, figure folder (inside
    the report folder), and the profiles that exist."""

    scale: Scale
    out: Path
    report_dir: Path
    available_profiles: tuple[str, ...]

    @property
    def fig_dir(self) -> Path:
        return self.report_dir / "fig"

    def profiles(self, setup: str, section: str) -> tuple[str, ...]:
        return profiles_for(setup, self.available_profiles, section in self.scale.both_profiles)

    def primary(self, setup: str) -> str:
        """The profile a single-profile experiment of `setup` runs on."""
        return profiles_for(setup, self.available_profiles, False)[0]

    def table_point(self, policy: str, rate: float, profile: str, **fields: Any) -> BenchPoint:
        """A point of a single-setting table: the INFERCEPT trace over `table_window`."""
        scale = self.scale
        return point(policy, rate, profile, INFERCEPT, scale.table_window, scale.drain, **fields)

    def seeded(self, points: Iterable[BenchPoint]) -> list[BenchPoint]:
        """Every point once per seed of the scale."""
        return [replace(p, seed=s) for p in points for s in self.scale.seeds]


class Results:
    """The finished points' rows; `row(point)` averages a point over the scale's seeds."""

    def __init__(self, rows: Mapping[BenchPoint, list[Row]], seeds: Sequence[int]) -> None:
        self._rows = dict(rows)
        self.seeds = tuple(seeds)

    def row(self, point: BenchPoint) -> Row | None:
        """The point's row averaged over seeds; None unless every seed finished."""
        raw = [self._rows.get(replace(point, seed=s)) for s in self.seeds]
        if any(r is None for r in raw):
            return None
        rows = [row for r in raw if r is not None for row in r]
        if len(rows) == 1:
            return rows[0]
        merged = aggregate(rows)
        return merged[0] if len(merged) == 1 else None

    def rows(self, points: Iterable[BenchPoint]) -> list[Row]:
        """The rows of the points that finished (in point order)."""
        return [r for p in points if (r := self.row(p)) is not None]

    def value(self, point: BenchPoint, key: str) -> Any:
        row = self.row(point)
        return None if row is None else row.get(key)

    def missing(self, points: Iterable[BenchPoint]) -> int:
        return sum(1 for p in points if self.row(p) is None)


PointsFn = Callable[[Context], list[BenchPoint]]
RenderFn = Callable[[Context, Results], str]
PrepareFn = Callable[[Context], None]


@dataclass(frozen=True)
class Section:
    """One section of the report. `points` lists settings without seeds (the run expands
    them over the scale's seeds); `prepare` runs before any point (in this process)."""

    name: str
    title: str
    points: PointsFn
    render: RenderFn
    prepare: PrepareFn | None = None


def unique(points: Iterable[BenchPoint]) -> list[BenchPoint]:
    """Each point once, in first-seen order."""
    return list(dict.fromkeys(points))


def rel(ctx: Context, path: Path) -> str:
    """`path` relative to the report folder (for Markdown links)."""
    return path.resolve().relative_to(ctx.report_dir.resolve()).as_posix()
