"""`augserve_resident_memory_bytes` in /metrics is the server process's resident memory:
it grows by what the process touches."""

from __future__ import annotations

import numpy as np

from augserve.core.metrics import SLOConfig
from augserve.server.metrics import ServerMetrics

NAME = "augserve_resident_memory_bytes"


def _gauge(m: ServerMetrics) -> float:
    lines = [ln for ln in m.render().decode().splitlines() if ln.startswith(NAME + " ")]
    assert len(lines) == 1, lines
    return float(lines[0].split()[1])


def test_resident_memory_gauge_follows_the_process() -> None:
    m = ServerMetrics(lambda: None, SLOConfig(norm_latency_slo=0.1))
    before = _gauge(m)
    assert before > 10 * 2**20  # a Python process with numpy and prometheus loaded
    block = np.ones(128 * 2**20, dtype=np.uint8)  # 128 MiB, every page touched
    assert _gauge(m) - before >= 100 * 2**20
    del block
