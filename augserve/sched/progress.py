"""Progress under overload: the rules every policy's packing runs under.

A ranking decides the order in which requests are offered the batch; these
rules decide when a request may take blocks away from another, so that no
ranking can make the scheduler go round in circles (docs/scheduler.md,
"Progress under overload"):

1. Growth first. When free plus reclaimable device memory cannot give the
   requests that hold KV the blocks they need this iteration, they are offered
   the batch before any request without KV is admitted (vLLM's rule: running
   requests first). Admitting a request only to preempt it, or to make a
   running request preempt another, wastes the compute of both.
2. Protection. Preemption (discard and recompute) goes from a holder to one
   it outranks by the policy's `preempt_key`, which does not age (with
   AugServe's aging value two requests could otherwise preempt each other
   forever). Where that key still moves as requests progress (AugServe's
   space-time cost grows with the context once a request outlives its
   prediction, so the one that has computed most ranks last), holders can
   take turns preempting each other: 60 long requests on a full pool
   recomputed 150 tokens per token served on the server. A request preempted
   `max_preemptions` times in its segment is therefore *protected*: offered
   the batch first and ordered before every unprotected request (protected
   ones among themselves by when they were protected), so only a request
   protected before it may take its KV. The first in that order can take any
   memory, so it always progresses; a request loses its KV at most
   `max_preemptions` times before protection and, after it, only to the
   finitely many requests protected earlier, which bounds the recompute. The
   order otherwise stays the ranking's: an earlier version that let only
   older requests preempt cost AugServe 28% of its goodput (its young, short,
   high-value requests could not grow).

3. Newest first (`SchedulerConfig.newest_first`, an option, off by default; in place
   of rule 2 where it applies). While the rules are engaged, the order of taking KV is the
   order in which holders got it (admission, or a session's KV handed to its next
   turn): a holder may preempt only holders that got KV after it, the last first
   (vLLM's order). The order is fixed while a request holds KV, so it cannot cycle:
   the oldest holder always progresses. Rule 2's victims were those that had
   computed most, each lost twice before protection. Measured mixed (docs/scheduler.md),
   so the paper's policy keeps rule 2 unless asked.

Policies whose preemption order is fixed (FCFS, shortest-predicted-job-first,
MARS's FCFS among holders) cannot cycle: the lowest key always progresses, so
rule 2 is off for them and they keep their reference behaviour. The rules are
pure functions of the scheduler's state, so simulator, engine and plugin decide
alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from augserve.core.request import Request


class ThrashMeter:
    """Is preemption throwing work away faster than requests get anywhere? The rules
    engage only while the computed tokens that preemption discarded exceed `budget`
    per token of the segments that ended (finished, or reached their call), over a
    window that decays by `decay` per iteration (~1 / (1 - decay) iterations). A
    policy that preempts long requests to finish short ones (AugServe at overload)
    ends many segments for what it throws away and keeps its own packing; a thrash
    ends none."""

    def __init__(self, budget: float | None, decay: float = 0.995) -> None:
        self.budget = budget
        self.decay = decay
        self.done = 0.0  # tokens of the segments that ended, decayed
        self.lost = 0.0  # computed tokens preemption threw away, decayed
        self._seen = 0  # the KV manager's recomputed-token count last seen
        self._ended = 0  # tokens of ended segments since the last iteration

    @property
    def engaged(self) -> bool:
        return self.budget is None or self.lost > self.budget * self.done

    def segment_ended(self, req: Request) -> None:
        """`req` ended a segment: its context counts, less what a session continuation
        carried over from its previous turn (counted when that turn ended)."""
        self._ended += req.num_tokens - req.num_inherited_tokens

    def observe(self, recomputed_total: int) -> None:
        """Once per iteration, with the KV manager's running recompute count."""
        d = self.decay
        self.done = self.done * d + self._ended
        self.lost = self.lost * d + (recomputed_total - self._seen)
        self._seen, self._ended = recomputed_total, 0


class Protection:
    """Who may take KV from whom where the policy's order moves (rule 2)."""

    def __init__(
        self,
        max_preemptions: int | None,
        key: Callable[[Request], tuple[Any, ...]],
        newest_first: bool = False,
    ) -> None:
        """`key`: the policy's `preempt_key`; `max_preemptions` None: never protect (a
        fixed order); `newest_first`: rule 3 instead of protection, where it is on."""
        self.max_preemptions = max_preemptions
        self.key = key
        self.newest_first = newest_first and max_preemptions is not None
        self.engaged = True  # protections are handed out only while thrashing
        self._protected = 0  # protections handed out
        self._kv_given = 0  # stamps of getting KV handed out (rule 3)

    @property
    def by_arrival_of_kv(self) -> bool:
        """Rule 3 holds: the order of taking KV is the order in which holders got it."""
        return self.newest_first and self.engaged

    def got_kv(self, req: Request) -> None:
        """`req` got KV (admitted, or a session's KV handed over): stamp its place."""
        req.kv_order = self._kv_given
        self._kv_given += 1

    def preempted(self, req: Request) -> None:
        """`req` lost its KV to a preemption: count it, protect it at the limit."""
        req.num_preemptions += 1
        limit = self.max_preemptions
        if (
            limit is not None
            and self.engaged
            and not self.by_arrival_of_kv
            and req.protected is None
            and req.num_preemptions >= limit
        ):
            req.protected = self._protected
            self._protected += 1

    @staticmethod
    def segment_done(req: Request) -> None:
        """The request finished a segment (its call started): progress was made."""
        req.num_preemptions = 0
        req.protected = None

    def order(self, req: Request) -> tuple[Any, ...]:
        """The order of taking KV, a lower order may preempt a higher one: protected
        requests first (in the order of protection), then, while rule 3 holds, the
        order of getting KV, else the policy's `preempt_key`."""
        if req.protected is not None:
            return (0, req.protected)
        if self.by_arrival_of_kv:
            return (1, req.kv_order if req.kv_order is not None else self._kv_given)
        return (1, self.key(req))


def growth_blocks(holders: Iterable[Request], block_size: int) -> int:
    """Device blocks the KV holders need to compute their whole known context: one for
    a decode at a block boundary, the rest of a prefill or recompute, the host blocks
    of a swapped request."""
    need = 0
    for r in holders:
        short = -(-r.num_tokens // block_size) - len(r.block_ids)
        if short > 0:
            need += short
    return need
