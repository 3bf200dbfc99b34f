"""The vLLM plugin against vLLM's default scheduler under the protocol (issue 40's
must-show; docs/vllm-plugin.md, "The plugin under the protocol: r1"): the parts run so
far follow the config committed before them, with the same vLLM flags on both servers
but the scheduler class, the online predictor, the SLO told, quiet; the attainments and
crossings the docs state are in them. Parts 0 and 1 of 3 have run."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from augserve.bench.capacity import crossing

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-plugin-r1.json"
PARTS = {k: ROOT / "docs" / "data" / f"vs-vllm-plugin-r1-part-{k}.json" for k in (0, 1)}
OURS = "vllm-plugin:augserve+online"
PLUGIN = "--scheduler-cls augserve.integrations.vllm.AugServeScheduler"
STATED = {0: {(1.5, "vllm"): 100, (1.5, OURS): 100, (4.0, "vllm"): 93, (4.0, OURS): 90,
              (6.5, "vllm"): 71, (6.5, OURS): 77},
          1: {(1.5, "vllm"): 98, (1.5, OURS): 100, (4.0, "vllm"): 86, (4.0, OURS): 86,
              (6.5, "vllm"): 78, (6.5, OURS): 79}}  # fmt: skip
CROSSING = {0: {"vllm": 4.35, OURS: 3.92}, 1: {"vllm": 3.10, OURS: 3.22}}


def _part(k: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(PARTS[k].read_text())
    return data


@pytest.mark.parametrize("k", sorted(PARTS))
def test_each_part_ran_its_repeat_of_the_committed_config(k: int) -> None:
    part, cfg = _part(k), json.loads(CONFIG.read_text())
    assert part["config"] == "benchmarks/configs/vs-vllm-plugin-r1.json"
    assert part["config_sha256"] == hashlib.sha256(CONFIG.read_bytes()).hexdigest()
    assert part["repeats_run"] == [k] and cfg["settings"]["augserve_engine"] == "vllm-plugin"
    ours, theirs = part["servers"][OURS], part["servers"]["vllm"]
    # the same vLLM server and flags, plus only our scheduler class and its options
    assert ours.startswith(theirs.split(" --port ")[0]) and PLUGIN in ours and PLUGIN not in theirs
    assert (
        ours.split(" --port ")[1]
        .split(" ", 1)[1]
        .startswith(theirs.split(" --port ")[1].split(" ", 1)[1])
    )
    opts = json.loads(ours.split("--additional-config ", 1)[1])["augserve"]
    assert (opts["policy"], opts["predictor"]) == ("augserve", "online")
    assert opts["slo_ttft"] == cfg["slo"]["ttft_s"]
    assert "--num-gpu-blocks-override 128" in ours and "--num-gpu-blocks-override 128" in theirs
    cells = {(r["rate"], r["engine"]) for r in part["rows"]}
    assert cells == {(rate, e) for rate in cfg["rates"] for e in ("vllm", OURS)}
    for r in part["rows"]:
        assert r["repeat"] == k and r["load_avg_1min"] < 1.5 and not r["errors"]


@pytest.mark.parametrize("k", sorted(PARTS))
def test_the_attainments_and_crossings_the_docs_state(k: int) -> None:
    rows = _part(k)["rows"]
    got = {(r["rate"], r["engine"]): round(100 * r["metrics"]["slo_attainment"]) for r in rows}
    assert got == STATED[k]
    for engine, want in CROSSING[k].items():
        pts = sorted((r["rate"], r["metrics"]["slo_attainment"]) for r in rows
                     if r["engine"] == engine)  # fmt: skip
        cross = crossing([p[0] for p in pts], [p[1] for p in pts], 0.9)
        assert cross.censored == "" and round(cross.rate, 2) == want
