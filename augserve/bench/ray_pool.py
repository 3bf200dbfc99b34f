"""Run bench points as Ray tasks (the optional `ray` extra: `pip install 'augserve[ray]'`).

`run_points_ray` is `pool.run_points` on a Ray cluster: every point is one task
(`num_cpus=1`, the costliest submitted first), results come back as they
finish and go to `on_result` in this process. Ray is the whole distributed
engine here: scheduling, placement and transport are its own.

Where the cluster comes from (`address`):

- `local`: start a private Ray instance on this machine with `workers` CPUs,
  and shut it down at the end;
- `auto`, or `HOST:PORT` / `ray://HOST:PORT`: connect to a running cluster
  (`ray start --head` ...), and disconnect at the end (the cluster stays up);
- if this process already called `ray.init`, that session is used as it is.

The nodes need augserve installed at the same version (the point cache keys on
it), and any file a point names (a trace file, a learned predictor's folder) at
the same path; points that name shipped data by workload name
(`infercept`, `toolbench-like`, ...) need nothing else. On Ctrl-C the pending
tasks are cancelled (force: their worker processes are killed) and the
KeyboardInterrupt goes on to the caller, as with the process pool.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from augserve.bench.pool import OnResult, cost_order, progress_bar, run_one
from augserve.bench.runner import BenchPoint, Row

LOCAL = "local"
_POLL_S = 0.5  # ray.wait timeout, so that Ctrl-C is seen within about this long


def import_ray() -> Any:
    """The `ray` module, or a one-line ValueError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ValueError(
            "--ray needs Ray: pip install 'augserve[ray]' (or: pip install ray)"
        ) from None
    return ray


def connect(address: str, workers: int | None = None) -> bool:
    """Start or join a Ray cluster (see the module doc). True if this call did, so the
    caller should `ray.shutdown()` when done; False if a session was already open."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    opts: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if address == LOCAL:
        _start_local(ray, workers, opts)
    else:
        try:
            ray.init(address=address, **opts)
        except ConnectionError as exc:
            raise ValueError(f"--ray {address}: no Ray cluster there ({exc})") from None
    return True


def _start_local(ray: Any, workers: int | None, opts: dict[str, Any], tries: int = 2) -> None:
    """`ray.init` of a private instance. Ray gives its node processes a fixed 30 s to
    register; on a loaded machine that can run out, so one more try is made."""
    for attempt in range(tries):
        try:
            ray.init(num_cpus=workers, include_dashboard=False, **opts)
            return
        except Exception as exc:  # Ray raises a bare Exception for this
            ray.shutdown()
            if "timed out during startup" not in str(exc) or attempt == tries - 1:
                raise ValueError(f"--ray local: Ray did not start: {exc}") from None


def run_points_ray(
    points: Sequence[BenchPoint],
    address: str = LOCAL,
    workers: int | None = None,
    progress: bool = True,
    on_result: OnResult | None = None,
    desc: str = "bench",
) -> list[Row]:
    """Run every point as a Ray task; the rows in point order (as `pool.run_points`)."""
    ray = import_ray()
    started = connect(address, workers)
    bar = progress_bar(len(points), progress, desc)
    by_index: dict[int, list[Row]] = {}
    pending: list[Any] = []
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(run_one)
        refs = {task.remote(points[i]): i for i in cost_order(points)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=_POLL_S)
            for ref in ready:
                i = refs[ref]
                by_index[i] = ray.get(ref)
                if on_result is not None:
                    on_result(i, by_index[i])
                bar.update(1)
    except BaseException:
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    finally:
        bar.close()
        if started:
            ray.shutdown()
    return [row for i in range(len(points)) for row in by_index[i]]
