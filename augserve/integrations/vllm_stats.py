"""A vLLM stat logger that feeds `VllmStats` (what `/metrics` reads, `vllm_face.py`).

vLLM sends its scheduler's stats from the engine-core process with each output
batch when stats are on (`disable_log_stats=False`); `AsyncLLM` hands them to
every stat logger in the server's process (docs/vllm-plugin.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase  # type: ignore[import-not-found,unused-ignore]

from augserve.integrations.vllm_face import VllmStats


def stat_logger(stats: VllmStats) -> Callable[[Any, int], Any]:
    """A factory for `AsyncLLM(stat_loggers=[...])` whose loggers record into `stats`."""

    class _Logger(StatLoggerBase):  # type: ignore[misc,unused-ignore]
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.stats = stats

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,
            engine_idx: int = 0,
        ) -> None:
            if scheduler_stats is not None:
                self.stats.record(scheduler_stats)
            if iteration_stats is not None:
                self.stats.preemptions += int(getattr(iteration_stats, "num_preempted_reqs", 0))

        def log_engine_initialized(self) -> None:
            pass

    return _Logger
