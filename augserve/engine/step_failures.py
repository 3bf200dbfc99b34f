"""What the async engine keeps of failed steps (`augserve/engine/async_engine.py`): how
many failed, how many in a row (the engine is unhealthy at `FAILURES_UNHEALTHY`), the
last cause, and the message each failed request's stream raises as `RequestFailed`."""

from __future__ import annotations

import logging

from augserve.engine.engine_step import BatchFailed
from augserve.engine.outputs import RequestOutput

log = logging.getLogger("augserve.engine")

FAILURES_UNHEALTHY = 3  # failed steps in a row that make the engine unhealthy


class RequestFailed(RuntimeError):
    """The engine failed on this request (the forward of its batch raised); it finished
    with reason "error" (`output`) and its KV was freed. Other requests go on."""

    def __init__(self, message: str, output: RequestOutput | None = None) -> None:
        super().__init__(message)
        self.output = output


class StepFailures:
    """Failed steps' counts and, per request of a failed step, why it was aborted."""

    def __init__(self) -> None:
        self.failed_steps = 0  # steps that raised, in all
        self.in_a_row = 0
        self.last: str | None = None
        self.why: dict[str, str] = {}  # request id -> why its batch failed

    @property
    def healthy(self) -> bool:
        return self.in_a_row < FAILURES_UNHEALTHY

    def count(self, why: str, num_requests: int, exc: Exception) -> None:
        self.failed_steps += 1
        self.in_a_row += 1
        self.last = why
        log.error(
            "engine step failed (%s); %d request(s) finished with 'error', %d failure(s) in a row",
            why,
            num_requests,
            self.in_a_row,
            exc_info=exc,
        )

    def batch_failed(self, failed: BatchFailed) -> None:
        """Its requests' streams raise `RequestFailed` at their final output."""
        rids = failed.request_ids
        cause = failed.__cause__ if isinstance(failed.__cause__, Exception) else failed
        self.count(str(failed), len(rids), cause)
        msg = f"the forward failed ({failed}); its batch of {len(rids)} request(s) was aborted"
        for rid in rids:
            self.why[rid] = msg
