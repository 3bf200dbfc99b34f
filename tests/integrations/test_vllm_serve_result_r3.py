"""r3 of `augserve serve --engine vllm` against plain vLLM under the protocol (issue 40's
must-show; docs/results-vllm-plugin.md, "r3: read on the servers and by the client"): r2 with
every request timed by the servers, the client's reading kept beside. Each part ran its
repeat of the config committed before it, on part 0's commit and one machine, quiet;
every finished request was marked on both servers; the numbers the docs state, of
both readings, are the data's."""

from __future__ import annotations

import json
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

CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-serve-engine-vllm-r3.json"
R2 = ROOT / "benchmarks" / "configs" / "vs-vllm-serve-engine-vllm-r2.json"
MERGED = ROOT / "docs" / "data" / "vs-vllm-serve-engine-vllm-r3.json"
DATA = ROOT / "docs" / "data"
PARTS = {k: DATA / f"vs-vllm-serve-engine-vllm-r3-part-{k}.json" for k in (0, 1, 2)}
RATES = [1.5, 4.0, 6.5]


def _part(k: int) -> dict[str, Any]:
    return read_part(PARTS[k])


def _means(cells: list[dict[str, Any]]) -> dict[str, list[int]]:
    return mean_attainments(cells, RATES)


def test_r3_is_r2_timed_on_the_servers_and_nothing_else() -> None:
    r2, r3 = json.loads(R2.read_text()), json.loads(CONFIG.read_text())
    assert r3["settings"].pop("measure") == "server" and "measure" not in r2["settings"]
    for key in ("workload", "time_scale", "length_scale", "rates", "duration_s", "drain_s",
                "seeds", "split", "memory", "slo", "settings"):  # fmt: skip
        assert r3[key] == r2[key], key


@pytest.mark.parametrize("k", sorted(PARTS))
def test_each_part_ran_its_repeat_on_part_0s_commit_and_machine_all_marked(k: int) -> None:
    part = _part(k)
    check_served_part(part, _part(0), str(CONFIG.relative_to(ROOT)), k, CONFIG.read_bytes())


def test_read_on_the_servers_a_tie_censored_at_the_grid_top() -> None:
    """docs/results-vllm-plugin.md: mean attainment 99 / 99 / 87% ours, 99 / 99 / 84% vLLM; ours
    5.82 req/s, vLLM 5.45, both censored in a repeat; the ratio 1.07, per repeat 1.12 /
    0.83 / 1.00 (both above the grid in repeat 2), with no interval and no bound."""
    result = read(MERGED)
    assert result["config"] == str(CONFIG.relative_to(ROOT))
    assert [p["repeats_run"] for p in result["parts"]] == [[0], [1], [2]]
    again = capacities(result["cells"])
    assert again["capacity"] == result["capacity"]
    assert _means(result["cells"]) == {"vllm": [99, 99, 84], OURS: [99, 99, 87]}
    a, v = result["capacity"][OURS], result["capacity"]["vllm"]
    assert (round(a["rate"], 2), a["per_repeat_censored"]) == (5.82, ["", "", "above"])
    assert (round(v["rate"], 2), v["per_repeat_censored"]) == (5.45, ["", "above", "above"])
    ratio = result["capacity_ratio"][OURS]
    assert round(ratio["ratio"], 2) == 1.07 and ratio["censored"]
    assert [round(x, 2) for x in ratio["per_repeat"]] == [1.12, 0.83, 1.0]
    assert ratio["lower_bound"] is None and ratio["interval"]["low"] is None
    cells = {(c["rate"], c["engine"]): c for c in result["cells"]}
    good = [round(cells[(6.5, e)]["goodput_interval"]["mean"], 2) for e in (OURS, "vllm")]
    assert good == [5.56, 5.36]


def test_read_by_the_client_the_same_replays_tie_too() -> None:
    """The client's reading of the same replays (r2's way of timing): 95 / 86 / 73% ours,
    96 / 83 / 71% vLLM; ours 2.84 req/s, vLLM 2.62, ratio 1.08 (censored: both below the
    grid in repeat 2), per repeat 1.53 / 0.81 / 1.00. Not r2's 0.70 on this machine."""
    cells, caps = client_reading(read(MERGED))
    assert _means(cells) == {"vllm": [96, 83, 71], OURS: [95, 86, 73]}
    a, v = caps["capacity"][OURS], caps["capacity"]["vllm"]
    assert (round(a["rate"], 2), round(v["rate"], 2)) == (2.84, 2.62)
    ratio = caps["capacity_ratio"][OURS]
    assert round(ratio["ratio"], 2) == 1.08 and ratio["censored"]
    assert [round(x, 2) for x in ratio["per_repeat"]] == [1.53, 0.81, 1.0]
