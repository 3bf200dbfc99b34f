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
2. A fixed order for taking KV. Preemption (discard and recompute) goes from
   a holder to one after it in an order that does not move while they hold
   KV. For most policies that is the policy's `preempt_key` (arrival, a
   predicted length). Where the policy's key moves as requests progress
   (AugServe's space-time cost grows with the context once a request outlives
   its prediction), two holders could take turns preempting each other, so
   the order is the admission order instead (vLLM's: the latest admitted is
   preempted first), while the policy still decides who is offered the batch
   and who is admitted. A request admitted last is the first victim, so it
   could be preempted again and again: once preempted `max_preemptions` times
   in its segment it is *protected*: offered the batch first and ordered before
   every unprotected holder (protected ones among themselves by when they were
   protected). The first in the order can take any memory, so it always
   progresses; a request loses its KV at most `max_preemptions` times before
   protection and, after it, only to the finitely many requests protected
   earlier, which bounds the recompute.

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


class Protection:
    """Who may take KV from whom where the policy's order moves (rule 2)."""

    def __init__(
        self,
        max_preemptions: int | None,
        fixed: Callable[[Request], tuple[Any, ...]] | None = None,
    ) -> None:
        """`fixed`: the policy's `preempt_key` where it is a fixed order (None: the
        policy's order moves, holders are ordered by admission)."""
        self.max_preemptions = max_preemptions
        self.fixed = fixed
        self._protected = 0  # protections handed out
        self._admitted = 0  # admissions seen

    def admitted(self, req: Request) -> None:
        """`req` got KV after holding none: it joins the holders' order last."""
        req.admission = self._admitted
        self._admitted += 1

    def preempted(self, req: Request) -> None:
        """`req` lost its KV to a preemption: count it, protect it at the limit."""
        req.num_preemptions += 1
        limit = self.max_preemptions
        if limit is not None and req.protected is None and req.num_preemptions >= limit:
            req.protected = self._protected
            self._protected += 1

    @staticmethod
    def segment_done(req: Request) -> None:
        """The request finished a segment (its call started): progress was made."""
        req.num_preemptions = 0
        req.protected = None

    def order(self, req: Request) -> tuple[Any, ...]:
        """The holders' order for taking KV, a lower order may preempt a higher one:
        protected requests first (in the order of protection), then the policy's fixed
        order, or admission order where the policy's moves."""
        if req.protected is not None:
            return (0, req.protected)
        return (1, self.fixed(req) if self.fixed is not None else req.admission)


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
