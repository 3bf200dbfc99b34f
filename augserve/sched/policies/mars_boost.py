"""MARS's anti-starvation state (mars-codebase `vllm/sequence.py` and `SchedulerV2`).

A waiting request that has run before counts +1 at the end of every iteration
it is skipped; when the count reaches the threshold the next sort gives it a
quantum, and from the iteration after that it goes ahead of the other waiting
requests while the quantum lasts (one off per iteration, waiting or running);
a call resets both. The state is computed in closed form from the iteration at
which the count started, so nothing is touched per iteration.
"""

from __future__ import annotations


class BoostClock:
    """Iterations are numbered 1, 2, ...; `done` is the last one finished.

    `since[rid]`: the iteration at whose end a waiting request's count first
    reached 1; it is boosted at iteration k when (k - since - 1) mod (limit +
    quantum) >= limit. `until[rid]`: the last boosted iteration of a window
    that began before the request last ran; `running_until[rid]`: the same for
    a running request.
    """

    def __init__(self, limit: int, quantum: int) -> None:
        self.limit, self.quantum = limit, quantum
        self.period = limit + quantum
        self.done = 0
        self.since: dict[str, int] = {}
        self.until: dict[str, int] = {}
        self.running_until: dict[str, int] = {}

    def is_boosted(self, rid: str, k: int) -> bool:
        until = self.until.get(rid)
        if until is not None and k <= until:
            return True
        since = self.since.get(rid)
        if since is None:
            return self.running_until.get(rid, 0) >= k
        m = k - since - 1
        return m >= 0 and m % self.period >= self.limit

    def next_change(self, rid: str, k: int) -> int | None:
        """The first iteration after `k` at which a waiting request's boost changes."""
        until = self.until.get(rid)
        if until is not None and k <= until:
            return until + 1
        since = self.since.get(rid)
        if since is None:
            return None
        m = k - since - 1
        if m < 0:
            return since + 1 + self.limit
        phase = m % self.period
        return k + (self.limit - phase if phase < self.limit else self.period - phase)

    def enter(self, rid: str, k: int) -> None:
        """The request (which has run before) starts waiting at iteration `k`."""
        if rid in self.since:
            return
        window = self.running_until.pop(rid, None)
        if window is not None and window >= k:
            self.until[rid] = self.since[rid] = window
        else:
            self.since[rid] = k

    def leave(self, rid: str, k: int) -> None:
        """The request is scheduled at iteration `k` (it runs from now on)."""
        since = self.since.pop(rid, None)
        until = self.until.pop(rid, None)
        if since is None:
            return
        if until is not None and k <= until:
            self.running_until[rid] = until
            return
        m = k - since - 1
        phase = m % self.period if m >= 0 else -1
        if phase >= self.limit - 1:  # the quantum was given at or before this sort
            self.running_until[rid] = k - phase + self.limit + self.quantum - 1
        else:
            self.running_until.pop(rid, None)

    def reset(self, rid: str) -> None:
        self.since.pop(rid, None)
        self.until.pop(rid, None)
        self.running_until.pop(rid, None)
