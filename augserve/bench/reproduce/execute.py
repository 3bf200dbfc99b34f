"""Run the points of some sections once each, cached, locally or on Ray.

Every distinct point (sections share many) is computed once and saved in
`OUT/points/` as it finishes (`PointCache`, keyed on the point, the augserve
version and a hash of the simulator/scheduler source), so an interrupted run
resumes and a rerun after a code change recomputes. Ctrl-C stops the workers
(or cancels the Ray tasks) and returns what finished.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from augserve.bench.cache import PointCache
from augserve.bench.pool import run_points
from augserve.bench.reproduce.plan import Context, Section, unique
from augserve.bench.runner import BenchPoint, Row


@dataclass
class RunState:
    """What a run has: the rows of every finished point, and how far it got."""

    rows: dict[BenchPoint, list[Row]] = field(default_factory=dict)
    wanted: int = 0  # distinct points the run's sections need
    reused: int = 0  # of those, found in the cache
    computed: int = 0  # of those, computed by this run
    interrupted: bool = False
    errors: dict[str, str] = field(default_factory=dict)  # setting -> why it cannot run


def check_points(points: Sequence[BenchPoint]) -> tuple[list[BenchPoint], dict[str, str]]:
    """The points whose profile and scheduler config can be built, and for the others
    one line each (e.g. an option a scheduler version does not have)."""
    from augserve.bench.runner import point_scheduler_config
    from augserve.profiles import load_profile

    verdict: dict[tuple[object, ...], str | None] = {}
    ok, errors = [], {}
    for p in points:
        key = (p.profile, p.policy, p.overrides, p.beta, p.max_batch_tokens, p.block_size)
        if key not in verdict:
            try:
                point_scheduler_config(p, load_profile(p.profile))
                verdict[key] = None
            except (ValueError, OSError) as exc:
                verdict[key] = str(exc).splitlines()[0]
        why = verdict[key]
        if why is None:
            ok.append(p)
        else:
            errors[f"{p.policy} on {p.profile} {dict(p.overrides) or ''}".strip()] = why
    return ok, errors


def section_points(ctx: Context, sections: Sequence[Section]) -> list[BenchPoint]:
    """Every point the sections need, once per seed, each once."""
    return unique(p for s in sections for p in ctx.seeded(s.points(ctx)))


def cached_rows(cache: PointCache, points: Sequence[BenchPoint]) -> dict[BenchPoint, list[Row]]:
    return {p: rows for p in points if (rows := cache.get(p)) is not None}


def run_sections(
    ctx: Context,
    sections: Sequence[Section],
    workers: int,
    ray_address: str | None = None,
    progress: bool = True,
    fresh: bool = False,
) -> RunState:
    """Prepare, then compute what is not cached. A KeyboardInterrupt stops the run and is
    recorded in the state (`interrupted`), not raised."""
    cache = PointCache(ctx.out, code=True)
    state = RunState()
    try:
        for section in sections:
            if section.prepare is not None:
                section.prepare(ctx)
        points, state.errors = check_points(section_points(ctx, sections))
        for what, why in state.errors.items():
            print(f"reproduce: skipping {what}: {why}", file=sys.stderr)
        state.wanted = len(points)
        state.rows = {} if fresh else cached_rows(cache, points)
        state.reused = len(state.rows)
        todo = [p for p in points if p not in state.rows]
        _announce(state, todo, workers, ray_address, cache)

        def finished(i: int, rows: list[Row]) -> None:
            state.rows[todo[i]] = rows
            state.computed += 1
            cache.put(todo[i], rows)

        if todo and ray_address:
            from augserve.bench.ray_pool import run_points_ray

            run_points_ray(todo, ray_address, workers, progress, finished, desc="reproduce")
        elif todo:
            run_points(todo, workers, progress, finished, desc="reproduce")
    except KeyboardInterrupt:
        state.interrupted = True
    return state


def _announce(
    state: RunState, todo: Sequence[BenchPoint], workers: int, ray: str | None, cache: PointCache
) -> None:
    where = f"Ray ({ray})" if ray else f"{workers} worker process(es)"
    print(
        f"reproduce: {state.wanted} points, {state.reused} reused from {cache.dir}, "
        f"{len(todo)} to compute on {where}",
        file=sys.stderr,
        flush=True,
    )
