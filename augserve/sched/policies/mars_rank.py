"""MARS's ranking key, its two parts: the round score and the anti-starvation boost
(docs/paper.md section 6).

The round score (mars-codebase `vllm/core/policy.py`, class V2, `get_priority`).

In 64-token blocks (`get_priority`'s default block size, which its callers
never change): before = blocks of the original prompt plus the predicted
tokens before the call, after = blocks of those predicted tokens plus the
returned ones, and mt(b) the memory-time of computing b blocks in chunks of
c = max(384 - running batch, 1) tokens, n = ceil(64 b / c) iterations of f_s
seconds: mt(b) = f_s (1 + n) n / 2 c, with f_s = (0.1 * 384 + 10) / 1000 s.

- Preserve: mt(before) + 64 before x tau_call + mt(after)
- Discard:  mt(before) + mt(before + after)   (only the second term without a call)
- Swap:     mt(before) + 2 swap + 0.1 tau_call + mt(after)   (swap + mt(after) without
  a call), swap = before^2 / (2 x 2): a transfer rate of 2 blocks/s.

`score` computes one request's score and `scores` a whole queue's with numpy,
with the same float operations in the same order (the two agree bit for bit).

The boost (`BoostClock`; mars-codebase `vllm/sequence.py` and `SchedulerV2`): a
waiting request that has run before counts +1 at the end of every iteration it is
skipped; when the count reaches the threshold the next sort gives it a quantum,
and from the iteration after that it goes ahead of the other waiting requests
while the quantum lasts (one off per iteration, waiting or running); a call
resets both. The state is computed in closed form from the iteration at which
the count started, so nothing is touched per iteration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from augserve.core.request import ContextPolicy

F_S = (0.1 * 384 + 10) / 1000  # seconds per 384-token iteration (a = 0.1, c = 10 in V2)
CHUNK = 384  # tokens per iteration V2 assumes; the running batch takes its share
BLOCK = 64  # tokens per block in V2's score
SWAP_API_WEIGHT = 0.1  # V2's "integral_swap_weight"

KINDS = {ContextPolicy.PRESERVE: 0, ContextPolicy.DISCARD: 1, ContextPolicy.SWAP: 2}

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Round:
    """What a request's score is made of, fixed on arrival and at each return."""

    before: int  # blocks: original prompt + predicted tokens before the call
    after: int  # blocks: predicted tokens before the call (+ the returned tokens)
    policy: ContextPolicy  # the context policy planned for the call
    call: float  # predicted call duration (0 without a call)
    complete: bool  # no call predicted: the request's last round


@dataclass(frozen=True, slots=True)
class ScoreParams:
    """The two choices the ablation can switch (see `SchedulerConfig`)."""

    block_triangle: bool  # V2's chunked triangle (False: tau_iter n (n + 1) / 2 over tokens)
    tau_iter: float
    swap_rate: float  # blocks per second in the swap term


def blocks_of(tokens: float) -> int:
    """V2's block count: (tokens + 63) // 64 (a float prediction floors, as in V2)."""
    return int((tokens + BLOCK - 1) // BLOCK)


def block_triangle(blocks: int, chunk: int) -> float:
    """V2's memory-time of computing `blocks` blocks in chunks of `chunk` tokens."""
    n = max((BLOCK * blocks + chunk - 1) // chunk, 1)
    return F_S * (1 + n) * n / 2 * chunk


def memory_time(blocks: int, chunk: int, params: ScoreParams) -> float:
    if params.block_triangle:
        return block_triangle(blocks, chunk)
    tokens = blocks * BLOCK
    return params.tau_iter * tokens * (tokens + 1) / 2


def score(r: Round, chunk: int, params: ScoreParams) -> float:
    """One request's round score (lower runs first)."""
    mt_before = memory_time(r.before, chunk, params)
    mt_after = memory_time(r.after, chunk, params)
    if r.policy is ContextPolicy.DISCARD:
        both = memory_time(r.before + r.after, chunk, params)
        return both if r.complete else mt_before + both
    if r.policy is ContextPolicy.SWAP:
        swap = r.before * (r.before / params.swap_rate) / 2
        if r.complete:
            return swap + mt_after
        return mt_before + swap + r.call * SWAP_API_WEIGHT + swap + mt_after
    return mt_before + r.before * BLOCK * r.call + mt_after


def _memory_times(blocks: IntArray, chunk: int, params: ScoreParams) -> FloatArray:
    if params.block_triangle:
        n = np.maximum((BLOCK * blocks + chunk - 1) // chunk, 1)
        out: FloatArray = F_S * (1 + n) * n / 2 * chunk
        return out
    tokens = blocks * BLOCK
    alt: FloatArray = params.tau_iter * tokens * (tokens + 1) / 2
    return alt


def scores(
    before: IntArray,
    after: IntArray,
    kind: npt.NDArray[np.int8],
    call: FloatArray,
    complete: npt.NDArray[np.bool_],
    chunk: int,
    params: ScoreParams,
) -> FloatArray:
    """`score` over arrays (kind: `KINDS` codes), element by element."""
    mt_before = _memory_times(before, chunk, params)
    mt_after = _memory_times(after, chunk, params)
    both = _memory_times(before + after, chunk, params)
    preserve = mt_before + before * BLOCK * call + mt_after
    discard = np.where(complete, both, mt_before + both)
    swap = before * (before / params.swap_rate) / 2
    swapped = np.where(
        complete, swap + mt_after, mt_before + swap + call * SWAP_API_WEIGHT + swap + mt_after
    )
    out: Any = np.where(kind == 1, discard, np.where(kind == 2, swapped, preserve))
    result: FloatArray = out
    return result


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
