"""Checks every committed protocol run of the tool workload against real vLLM must
pass (the r3 and r4 tests): it follows its config, with equal memory and no host
pool, and each cell has its 3 repeats on a quiet machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OURS = "augserve:augserve+online"


def check_follows_config(
    result: dict[str, Any], config: Path, rates: list[float], time_scale: float = 1.0
) -> None:
    cfg = json.loads(config.read_text())
    assert result["config"] == f"benchmarks/configs/{config.name}"
    assert result["rates"] == cfg["rates"] == rates
    assert result["seeds"] == cfg["seeds"] and result["repeats"] == 3
    assert result["time_scale"] == cfg["time_scale"] == time_scale
    assert result["memory"] == cfg["memory"]
    assert result["memory"]["augserve_host_tokens"] == 0  # no host pool for anyone
    assert result["slo"] == cfg["slo"]  # fixed before the run, never re-derived
    # a whole run names its servers once; a run merged from parts, in each part
    every = [result["servers"]] if "servers" in result else [p["servers"] for p in result["parts"]]
    for servers in every:
        assert "--predictor online" in servers[OURS]
        assert "--num-device-blocks 128" in servers[OURS]
        assert "--num-gpu-blocks-override 128" in servers["vllm"]
    # the calibration ran before the comparison
    assert cfg["calibration"]["date"] < result["date"]


def check_quiet_cells(result: dict[str, Any], rates: list[float], max_load: float) -> None:
    cells = {(c["rate"], c["engine"]): c for c in result["cells"]}
    assert set(cells) == {(r, e) for r in rates for e in ("vllm", OURS)}
    for c in cells.values():
        assert len(c["attainment"]) == 3 and len(c["load"]) == 3
        assert max(c["load"]) < max_load  # quiet: nothing else ran (1-minute load average)
    assert all(not r["errors"] for r in result["rows"])
