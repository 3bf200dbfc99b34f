"""Speculative shortest-job-first: rank by predicted remaining output (docs/paper.md section 6).

`ssjf` is the baseline as the paper ran it: its figure 18 shows SSJF with the
GPU cache under 50% and no CPU offloading, i.e. vLLM's handling of a call (KV
freed when the call starts, the whole context recomputed on return, where the
request re-enters ranked by its predicted length). `ssjf-infercept` is the
same order over INFERCEPT's min-waste handling of calls (lazy Preserve / Swap /
Discard): a stronger baseline the paper did not run.
"""

from __future__ import annotations

from typing import Any, ClassVar

from augserve.core.request import Request
from augserve.sched.call_handling import CallHandling, DiscardAtCall, MinWaste
from augserve.sched.policies.base import PAPER_DEFAULTS, RankingPolicy, predicted_remaining


class SSJFPolicy(RankingPolicy):
    name = "ssjf"
    defaults = PAPER_DEFAULTS
    call_handling: ClassVar[type[CallHandling]] = DiscardAtCall

    def key(self, req: Request, now: float) -> tuple[Any, ...]:
        return (predicted_remaining(req), req.queue_time, req.request_id)


class SSJFInferceptPolicy(SSJFPolicy):
    name = "ssjf-infercept"
    call_handling: ClassVar[type[CallHandling]] = MinWaste
