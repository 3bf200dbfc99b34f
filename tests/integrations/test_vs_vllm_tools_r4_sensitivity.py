"""Issue 36's sensitivity row: the tool workload's headline (r4) with every call 3.33x
and 10x shorter (time scales 0.3 and 0.1), each run as its committed config says
(docs/results-vs-vllm.md, "Time scale 0.3" and "Time scale 0.1"): three parts on one
commit and machine, quiet, equal memory, r3's SLO; the numbers the docs and the README
state are the data's."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integrations.protocol_runs import (
    OURS,
    check_follows_config,
    check_part,
    check_quiet_cells,
)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "vs_vllm"))

from bench_tools_protocol import capacities, read  # noqa: E402

DATA = ROOT / "docs" / "data"
RATES = [1.5, 4.0, 6.5, 9.0]
SCALES = [0.3, 0.1]

# what the docs state, per time scale: vLLM's capacity (mean curve, interval, per
# repeat), ours (mean curve, its censoring, per repeat), the ratio, mean attainments,
# goodput at 9.0 req/s, the calls' KV kept and dropped
EXPECTED: dict[float, dict[str, Any]] = {
    0.3: {
        "vllm": (2.61, (1.69, 3.46), [2.93, 2.58, 2.22]),
        "ours": (9.0, "above", ["below", "above", ""], 7.45),
        "ratio": 3.44,
        "attainment": {"vllm": [97, 82, 51, 58], OURS: [92, 100, 100, 91]},
        "goodput_9": (7.79, 4.80),
        "calls": {"preserve": 6439, "discard": 2316, "swap": 0},
    },
    0.1: {
        "vllm": (2.40, (1.21, 4.06), [2.82, 3.10, 2.0]),
        "ours": (8.68, "repeat", ["below", "above", ""], 7.43),
        "ratio": 3.61,
        "attainment": {"vllm": [99, 75, 44, 28], OURS: [93, 100, 92, 90]},
        "goodput_9": (7.67, 2.40),
        "calls": {"preserve": 5649, "discard": 3106, "swap": 0},
    },
}


def _paths(scale: float) -> tuple[Path, Path, dict[int, Path]]:
    name = f"vs-vllm-tools-protocol-r4-ts{scale}"
    parts = {k: DATA / f"{name}-part-{k}.json" for k in (0, 1, 2)}
    config = ROOT / "benchmarks" / "configs" / f"vs-vllm-tools-r4-ts{scale}.json"
    return DATA / f"{name}.json", config, parts


@pytest.mark.parametrize("scale", SCALES)
def test_the_run_follows_its_committed_config(scale: float) -> None:
    merged, config, _ = _paths(scale)
    result = read(merged)
    check_follows_config(result, config, RATES, time_scale=scale)
    check_quiet_cells(result, RATES, max_load=2.0)  # the run's own servers reach ~1.9


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("k", [0, 1, 2])
def test_each_part_ran_its_repeat_on_one_commit_and_machine(scale: float, k: int) -> None:
    _, config, parts = _paths(scale)
    part, first = json.loads(parts[k].read_text()), json.loads(parts[0].read_text())
    check_part(part, config, k)
    assert part["commit"] == first["commit"] and part["cpu"] == first["cpu"]
    assert not part["cpu"]["flags"]["avx512f"]  # an AVX2-only machine (r4: AVX-512)


@pytest.mark.parametrize("scale", SCALES)
def test_the_capacities_and_the_censored_ratio_the_docs_state(scale: float) -> None:
    want = EXPECTED[scale]
    result = read(_paths(scale)[0])
    assert capacities(result["cells"])["capacity"] == result["capacity"]
    v, a = result["capacity"]["vllm"], result["capacity"][OURS]
    rate, (low, high), per = want["vllm"]
    assert round(v["rate"], 2) == rate and not v["censored"]
    assert (round(v["interval"]["low"], 2), round(v["interval"]["high"], 2)) == (low, high)
    assert [round(x, 2) for x in v["per_repeat"]] == per
    rate, censored, per_censored, exact = want["ours"]
    assert round(a["rate"], 2) == rate and a["censored"] == censored
    assert a["per_repeat_censored"] == per_censored and round(a["per_repeat"][2], 2) == exact
    ratio = result["capacity_ratio"][OURS]
    assert round(ratio["ratio"], 2) == want["ratio"] and ratio["censored"]
    # bounds of both kinds across the repeats: no interval, not even a lower end
    assert ratio["interval"]["low"] is None and ratio["lower_bound"] is None


@pytest.mark.parametrize("scale", SCALES)
def test_mean_attainment_goodput_and_the_calls_kv(scale: float) -> None:
    want = EXPECTED[scale]
    result = read(_paths(scale)[0])
    by = {(c["rate"], c["engine"]): c for c in result["cells"]}
    mean = {e: [round(100 * by[(r, e)]["attainment_interval"]["mean"]) for r in RATES]
            for e in ("vllm", OURS)}  # fmt: skip
    assert mean == want["attainment"]
    goodput = (by[(9.0, OURS)]["goodput_interval"]["mean"],
               by[(9.0, "vllm")]["goodput_interval"]["mean"])  # fmt: skip
    assert tuple(round(g, 2) for g in goodput) == want["goodput_9"]
    policies = [r["metrics"]["call_policies"] for r in result["rows"] if r["engine"] == OURS]
    totals = {k: sum(p.get(k, 0) for p in policies) for k in ("preserve", "discard", "swap")}
    assert totals == want["calls"]


@pytest.mark.parametrize("scale", SCALES)
def test_each_part_s_first_cell_carries_a_fresh_server_s_first_requests(scale: float) -> None:
    """1.5 req/s, each part's first cell, is where ours missed in every repeat (87-96%),
    with TTFT p99 0.9-1.1 s; at 4.0 req/s, the next cell, ours met 100% in every repeat
    with TTFT p99 under 0.14 s (docs: "A fresh server's first requests")."""
    rows = [r for r in read(_paths(scale)[0])["rows"] if r["engine"] == OURS]
    first = [r["metrics"] for r in rows if r["rate"] == 1.5]
    second = [r["metrics"] for r in rows if r["rate"] == 4.0]
    assert all(0.9 < m["ttft_p99"] < 1.2 and m["slo_attainment"] < 0.97 for m in first)
    assert all(m["ttft_p99"] < 0.14 and m["slo_attainment"] == 1.0 for m in second)
