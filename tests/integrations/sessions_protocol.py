"""What every agent-session part run against real vLLM under the protocol must hold
(q2 on): its repeat of the committed config, equal memory, the SLO told, quiet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from augserve.bench.capacity import Crossing, crossing
from tests.integrations.protocol_runs import check_repeat_of_config

OURS = "augserve:augserve-slo+online"


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def attainments(part: dict[str, Any]) -> dict[tuple[float, str], int]:
    """(rate, engine) -> the part's SLO attainment in percent, as the docs state it."""
    return {
        (r["rate"], r["engine"]): round(100 * r["metrics"]["slo_attainment"]) for r in part["rows"]
    }


def part_crossing(part: dict[str, Any], engine: str, target: float = 0.9) -> Crossing:
    """Where `engine`'s attainment over the part's rates crosses `target`."""
    pts = sorted(
        (r["rate"], r["metrics"]["slo_attainment"]) for r in part["rows"] if r["engine"] == engine
    )
    return crossing([p[0] for p in pts], [p[1] for p in pts], target)


def check_part(part: dict[str, Any], config: Path, k: int) -> None:
    """Part `k` ran repeat k of `config` byte for byte, every cell finished, quiet."""
    cfg = check_repeat_of_config(part, config, k, ("vllm", OURS), max_load=2.0)
    ours, theirs = part["servers"][OURS], part["servers"]["vllm"]
    assert "--num-device-blocks 128" in ours and "--num-gpu-blocks-override 128" in theirs
    assert "--swap-space" not in ours  # no host pool: the same 4,096 KV tokens each
    assert "--predictor online" in ours and "--policy augserve-slo" in ours
    assert f"--set slo_ttft={cfg['slo']['ttft_s']}" in ours  # told the SLO it is judged by
    assert all(r["metrics"]["num_unfinished"] == 0 for r in part["rows"])


def check_merged(merged: dict[str, Any], config: Path, parts: list[Path]) -> dict[Any, int]:
    """The merged file is its parts' rows; returns the mean attainments in percent."""
    assert merged["repeats"] == len(parts) and merged["memory"] == read(config)["memory"]
    assert [p["repeats_run"] for p in merged["parts"]] == [[k] for k in range(len(parts))]
    for c in merged["cells"]:
        per = [
            r["metrics"]["slo_attainment"]
            for path in parts
            for r in read(path)["rows"]
            if (r["rate"], r["engine"]) == (c["rate"], c["engine"])
        ]
        assert c["attainment"] == per
    return {(c["rate"], c["engine"]): round(100 * c["attainment_interval"]["mean"])
            for c in merged["cells"]}  # fmt: skip


PLUGIN = "--scheduler-cls augserve.integrations.vllm.AugServeScheduler"


def check_plugin_part(
    part: dict[str, Any], config: Path, k: int, ours: str, policy: str, max_load: float = 2.0
) -> None:
    """A plugin part (`vs-vllm-plugin-*`): repeat k of `config` byte for byte; the same
    vLLM server and flags twice, the row `ours` adding only our scheduler class and its
    options (`policy`, the online predictor, the SLO told); `check_repeat_of_config`
    with `max_load`."""
    cfg = check_repeat_of_config(part, config, k, ("vllm", ours), max_load)
    assert cfg["settings"]["augserve_engine"] == "vllm-plugin"
    mine, theirs = part["servers"][ours], part["servers"]["vllm"]
    assert mine.startswith(theirs.split(" --port ")[0]) and PLUGIN in mine and PLUGIN not in theirs
    after_port = [cmd.split(" --port ")[1].split(" ", 1)[1] for cmd in (mine, theirs)]
    assert after_port[0].startswith(after_port[1])
    opts = json.loads(mine.split("--additional-config ", 1)[1])["augserve"]
    assert (opts["policy"], opts["predictor"]) == (policy, "online")
    assert opts["slo_ttft"] == cfg["slo"]["ttft_s"]
    assert "--num-gpu-blocks-override 128" in mine and "--num-gpu-blocks-override 128" in theirs
