"""r4 of `augserve serve --engine vllm` against plain vLLM under the protocol (issue 40's
must-show; docs/results-vllm-plugin.md, "r4: a fourth rate"): r3 with 9.0 req/s added to the
grid, so that each repeat's curve can cross inside it. Each part ran its repeat of the
config committed before it, on part 0's commit and one machine, quiet; every finished
request was marked on both servers; the numbers the docs state are the data's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "vs_vllm"))

from bench_tools_protocol import capacities, read  # noqa: E402

from tests.integrations.served_runs import (  # noqa: E402
    OURS,
    check_served_part,
    client_reading,
    mean_attainments,
    read_part,
)

CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-serve-engine-vllm-r4.json"
MERGED = ROOT / "docs" / "data" / "vs-vllm-serve-engine-vllm-r4.json"
DATA = ROOT / "docs" / "data"
PARTS = {k: DATA / f"vs-vllm-serve-engine-vllm-r4-part-{k}.json" for k in (0, 1, 2)}
RATES = [1.5, 4.0, 6.5, 9.0]


def _part(k: int) -> dict[str, Any]:
    return read_part(PARTS[k])


def _means(cells: list[dict[str, Any]]) -> dict[str, list[int]]:
    return mean_attainments(cells, RATES)


@pytest.mark.parametrize("k", sorted(PARTS))
def test_each_part_ran_its_repeat_on_part_0s_commit_and_machine_all_marked(k: int) -> None:
    part = _part(k)
    check_served_part(part, _part(0), str(CONFIG.relative_to(ROOT)), k, CONFIG.read_bytes())
    assert sorted({r["rate"] for r in part["rows"]}) == RATES


def test_read_on_the_servers_ours_ahead_in_every_repeat_the_interval_spans_one() -> None:
    """docs/results-vllm-plugin.md: mean attainment 99 / 99 / 83 / 80% ours, 99 / 94 / 67 / 53%
    vLLM; capacity ours 5.37 req/s, vLLM 4.39, ratio 1.22, uncensored; per repeat 1.46 /
    1.17 / 1.08, mean 1.24 [0.74, 1.73]; goodput at 9.0 req/s 6.82 against 4.38."""
    result = read(MERGED)
    assert result["config"] == str(CONFIG.relative_to(ROOT))
    assert [p["repeats_run"] for p in result["parts"]] == [[0], [1], [2]]
    assert capacities(result["cells"])["capacity"] == result["capacity"]
    assert _means(result["cells"]) == {"vllm": [99, 94, 67, 53], OURS: [99, 99, 83, 80]}
    a, v = result["capacity"][OURS], result["capacity"]["vllm"]
    assert (round(a["rate"], 2), round(v["rate"], 2)) == (5.37, 4.39)
    assert a["per_repeat_censored"] == v["per_repeat_censored"] == ["", "", ""]
    ratio = result["capacity_ratio"][OURS]
    assert round(ratio["ratio"], 2) == 1.22 and not ratio["censored"]
    assert [round(x, 2) for x in ratio["per_repeat"]] == [1.46, 1.17, 1.08]
    assert all(x > 1.0 for x in ratio["per_repeat"])
    iv = ratio["interval"]
    assert [round(iv[k], 2) for k in ("mean", "low", "high")] == [1.24, 0.74, 1.73]
    assert iv["low"] < 1.0 < iv["high"]  # not yet a win the interval carries
    cells = {(c["rate"], c["engine"]): c for c in result["cells"]}
    good = [round(cells[(9.0, e)]["goodput_interval"]["mean"], 2) for e in (OURS, "vllm")]
    assert good == [6.82, 4.38]


def test_read_by_the_client_the_same_order_wider() -> None:
    """The client's reading of the same replays: capacity ours 2.86 req/s, vLLM 2.45,
    ratio 1.17, per repeat 1.86 / 0.71 / 1.26, mean 1.28 [-0.15, 2.70]."""
    cells, caps = client_reading(read(MERGED))
    a, v = caps["capacity"][OURS], caps["capacity"]["vllm"]
    assert (round(a["rate"], 2), round(v["rate"], 2)) == (2.86, 2.45)
    ratio = caps["capacity_ratio"][OURS]
    assert round(ratio["ratio"], 2) == 1.17 and not ratio["censored"]
    assert [round(x, 2) for x in ratio["per_repeat"]] == [1.86, 0.71, 1.26]
    iv = ratio["interval"]
    assert [round(iv[k], 2) for k in ("mean", "low", "high")] == [1.28, -0.15, 2.7]
