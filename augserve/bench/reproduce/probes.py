"""Backends that watch a simulation as it runs (`runner.sim_point_row` with a probe).

A point names one by path, `BenchPoint(backend=OCCUPANCY, ...)`, so any worker
process (or Ray task) can run it. Each returns the usual metrics row plus:

- `run_occupancy`: device and host KV occupancy (% of blocks used) after every
  iteration, thinned to at most `SAMPLES` points (paper figure 18);
- `run_overhead`: the wall and CPU time of every `Scheduler.schedule()` call
  that produced an iteration, binned by the number of requests paused in a call
  when it ran (paper tables 3 and 6), measured on the real scheduler.
"""

from __future__ import annotations

import time
from typing import Any

from augserve.bench.reproduce.paper import PAUSED_BINS
from augserve.bench.runner import BenchPoint, Row, sim_point_row

OCCUPANCY = "augserve.bench.reproduce.probes:run_occupancy"
OVERHEAD = "augserve.bench.reproduce.probes:run_overhead"
SAMPLES = 400


class OccupancyProbe:
    """Blocks in use on device and host after each iteration."""

    def __init__(self) -> None:
        self.sim: Any = None
        self.device: list[int] = []
        self.host: list[int] = []

    def attach(self, sim: Any) -> None:
        self.sim = sim

    def observe(self, end: float, out: Any, upd: Any) -> None:
        pool = self.sim.sched.pool
        self.device.append(pool.num_device_blocks - pool.num_free_device)
        self.host.append(pool.num_host_blocks - pool.num_free_host)

    def summary(self) -> Row:
        pool = self.sim.sched.pool
        n = len(self.device)
        step = max(1, -(-n // SAMPLES))
        idx = list(range(0, n, step))
        dev_total, host_total = max(1, pool.num_device_blocks), max(1, pool.num_host_blocks)
        return {
            "occ_iteration": idx,
            "occ_device_pct": [round(100 * self.device[i] / dev_total, 2) for i in idx],
            "occ_host_pct": [round(100 * self.host[i] / host_total, 2) for i in idx],
            "occ_device_mean_pct": 100 * sum(self.device) / dev_total / max(1, n),
            "occ_host_mean_pct": 100 * sum(self.host) / host_total / max(1, n),
            "occ_host_blocks_total": pool.num_host_blocks,
        }


def _bin(paused: int) -> str:
    for name, lo, hi in PAUSED_BINS:
        if paused >= lo and (hi is None or paused < hi):
            return name
    return PAUSED_BINS[-1][0]


class OverheadProbe:
    """Times each `schedule()` call (wall and thread CPU) by wrapping the scheduler's
    method on its first iteration; bins the calls that made an iteration by the paused
    requests seen when the call started."""

    def __init__(self) -> None:
        self.sim: Any = None
        self._last: tuple[float, float, int] | None = None  # the last call: wall, cpu, paused
        self.bins: dict[str, list[float]] = {name: [0.0, 0.0, 0.0] for name, _, _ in PAUSED_BINS}
        self.total = [0.0, 0.0, 0.0]  # wall s, cpu s, iterations

    def attach(self, sim: Any) -> None:
        self.sim = sim

    def _wrap(self, sched: Any) -> None:
        inner = sched.schedule

        def timed(now: float) -> Any:
            paused = sched.num_in_calls()
            w0, c0 = time.perf_counter(), time.thread_time()
            out = inner(now)
            self._last = (time.perf_counter() - w0, time.thread_time() - c0, paused)
            return out

        sched.schedule = timed

    def observe(self, end: float, out: Any, upd: Any) -> None:
        if self._last is None:
            self._wrap(self.sim.sched)
            self._last = (0.0, 0.0, -1)
            return
        wall, cpu, paused = self._last
        for acc in (self.bins[_bin(paused)], self.total):
            acc[0] += wall
            acc[1] += cpu
            acc[2] += 1

    def summary(self) -> Row:
        row: Row = {"ovh_iterations": int(self.total[2])}
        n = max(1.0, self.total[2])
        row["ovh_wall_ms"] = 1000 * self.total[0] / n
        row["ovh_cpu_ms"] = 1000 * self.total[1] / n
        for name, (wall, cpu, k) in self.bins.items():
            row[f"ovh_bin_{name}_n"] = int(k)
            row[f"ovh_bin_{name}_wall_ms"] = 1000 * wall / k if k else None
            row[f"ovh_bin_{name}_cpu_ms"] = 1000 * cpu / k if k else None
        return row


def run_occupancy(point: BenchPoint) -> list[Row]:
    return [sim_point_row(point, OccupancyProbe())]


def run_overhead(point: BenchPoint) -> list[Row]:
    return [sim_point_row(point, OverheadProbe())]
