"""Checks every committed protocol run of the tool workload against real vLLM must
pass (r3 on): it follows its config, with equal memory and no host pool, each cell has
its repeats on a quiet machine, and each part of a split run is its repeat of the config."""

from __future__ import annotations

import hashlib
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


def check_repeat_of_config(
    part: dict[str, Any], config: Path, k: int, engines: tuple[str, str], max_load: float
) -> dict[str, Any]:
    """What every part of a split run must hold, whatever it compares: it ran repeat k of
    `config` byte for byte (its sha256), every cell of `engines` at the config's rates on
    the config's seeds, each started quiet (1-minute load under `max_load`) and without a
    client error. Returns the config."""
    cfg: dict[str, Any] = json.loads(config.read_text())
    assert part["config"] == f"benchmarks/configs/{config.name}"
    assert part["config_sha256"] == hashlib.sha256(config.read_bytes()).hexdigest()
    assert part["repeats_run"] == [k] and [k] in cfg["split"]
    cells = {(r["rate"], r["engine"]) for r in part["rows"]}
    assert cells == {(rate, e) for rate in cfg["rates"] for e in engines}
    for r in part["rows"]:
        seed = 1000 * cfg["seeds"][k] + cfg["rates"].index(r["rate"])
        assert r["repeat"] == k and r["seed"] == seed
        assert r["load_avg_1min"] < max_load and not r["errors"]
    return cfg


def check_part(part: dict[str, Any], config: Path, k: int, max_load: float = 2.0) -> None:
    """A part of a split tool run (`check_repeat_of_config`), with equal memory, no host
    pool, the online predictor, and every cell judged by the config's SLO."""
    cfg = check_repeat_of_config(part, config, k, ("vllm", OURS), max_load)
    ours, theirs = part["servers"][OURS], part["servers"]["vllm"]
    assert "--predictor online" in ours and "--num-device-blocks 128" in ours
    assert "--swap-space" not in ours and "--num-gpu-blocks-override 128" in theirs
    for r in part["rows"]:
        assert r["metrics"]["ttft_slo"] == cfg["slo"]["ttft_s"]
        assert r["metrics"]["norm_latency_slo"] == cfg["slo"]["norm_latency_s"]
