"""Checks every committed protocol run of `augserve serve --engine vllm` against plain
vLLM must pass (the r3 and r4 tests): each part ran its own repeat of the committed
config on part 0's commit and machine, on the AVX2-only machine, quiet, with both
servers timing every request through the same middleware."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

OURS = "augserve-vllm:augserve+online"
MARKS = "augserve.bench.request_marks.RequestMarks"


def read_part(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def mean_attainments(cells: list[dict[str, Any]], rates: list[float]) -> dict[str, list[int]]:
    """Each system's mean attainment over its repeats at each rate, in whole percent."""
    by = {(c["rate"], c["engine"]): c["attainment"] for c in cells}
    return {e: [round(100 * sum(by[(r, e)]) / len(by[(r, e)])) for r in rates]
            for e in ("vllm", OURS)}  # fmt: skip


def client_reading(result: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The client's reading (cells, capacities) recomputed from a merged run's rows, and
    checked equal to the one `bench_parts.py` stored beside the servers' reading."""
    from bench_tools_protocol import capacities, cells_from_rows  # benchmarks/vs_vllm

    cells = cells_from_rows(result["rows"], "metrics_client")
    caps: dict[str, Any] = capacities(cells)
    stored = result["client_reading"]
    assert stored["capacity"] == caps["capacity"]
    assert stored["capacity_ratio"] == caps["capacity_ratio"]
    return cells, caps


def check_served_part(part: dict[str, Any], first: dict[str, Any], config: str, k: int,
                      config_bytes: bytes, max_load: float = 2.0) -> None:  # fmt: skip
    assert part["config"] == config and part["repeats_run"] == [k]
    assert part["config_sha256"] == hashlib.sha256(config_bytes).hexdigest()
    assert part["commit"] == first["commit"] and part["cpu"] == first["cpu"]
    assert not part["cpu"]["flags"]["avx512f"]  # the AVX2-only machine (r2: AVX-512)
    ours, theirs = part["servers"][OURS], part["servers"]["vllm"]
    assert "serve --engine vllm" in ours and "--predictor online" in ours
    assert f"--middleware {MARKS}" in ours and f"--middleware {MARKS}" in theirs
    for r in part["rows"]:
        assert r["repeat"] == k and not r["errors"] and r["marks_missing"] == 0
        assert r["load_avg_1min"] < max_load  # quiet: only the run's own servers
        # the servers' marks lie inside the client's: its reading is never the better
        assert r["metrics"]["ttft_mean"] <= r["metrics_client"]["ttft_mean"]
