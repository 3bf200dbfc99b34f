"""`augserve_resident_memory_bytes` in /metrics is the server process's resident memory.

Checked against the kernel's own count (`VmRSS` in /proc/self/status) read beside it,
and in a fresh process, where touching 128 MiB must raise it by about that much (in a
long test run freed memory may be reused without the resident set growing)."""

from __future__ import annotations

import subprocess
import sys

from augserve.core.metrics import SLOConfig
from augserve.server.metrics import ServerMetrics

NAME = "augserve_resident_memory_bytes"


def _gauge(m: ServerMetrics) -> float:
    lines = [ln for ln in m.render().decode().splitlines() if ln.startswith(NAME + " ")]
    assert len(lines) == 1, lines
    return float(lines[0].split()[1])


def _vm_rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_resident_memory_gauge_is_the_process_resident_set() -> None:
    m = ServerMetrics(lambda: None, SLOConfig(norm_latency_slo=0.1))
    gauge, rss = _gauge(m), _vm_rss()
    assert gauge > 10 * 2**20  # a Python process with numpy and prometheus loaded
    assert abs(gauge - rss) < 64 * 2**20


def test_resident_memory_gauge_follows_what_a_fresh_process_touches() -> None:
    code = (
        "import numpy as np\n"
        "from augserve.core.metrics import SLOConfig\n"
        "from augserve.server.metrics import ServerMetrics\n"
        "m = ServerMetrics(lambda: None, SLOConfig(norm_latency_slo=0.1))\n"
        f"g = lambda: float([l for l in m.render().decode().splitlines() "
        f"if l.startswith('{NAME} ')][0].split()[1])\n"
        "before = g()\n"
        "block = np.ones(128 * 2**20, dtype=np.uint8)\n"
        "print(g() - before)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert float(out.stdout.strip()) >= 100 * 2**20
