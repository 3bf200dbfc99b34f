"""The plugin's r3 (issue 40; docs/results-vllm-plugin.md, "r3: r2 on a grid across the knee"):
r2 on rates 1.0-4.0 req/s with six fresh repeats, one part each, over two sittings, all
from the checkout of the commit that pre-registered it, on one machine kind. Each part is
its own repeat of the committed config; the merged reading, taken once after part 5, is
the one the docs and README state."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from augserve.bench.capacity import mean_interval
from tests.integrations.sessions_protocol import (
    attainments,
    check_merged,
    check_plugin_part,
    part_crossing,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "vs_vllm"))
from bench_tools_protocol import capacities, read  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "benchmarks" / "configs" / "vs-vllm-plugin-r3.json"
DATA = ROOT / "docs" / "data"
MERGED = DATA / "vs-vllm-plugin-r3.json"
RAN = (0, 1, 2, 3, 4, 5)  # all six parts
OURS = "vllm-plugin:augserve-slo+online"
RATES = (1.0, 2.0, 3.0, 4.0)
# per part: (vLLM, the plugin) attainment in % at 1.0 / 2.0 / 3.0 / 4.0 req/s
STATED = {0: ((100, 100, 71, 92), (100, 100, 87, 82)),
          1: ((100, 92, 84, 79), (97, 91, 90, 76)),
          2: ((100, 88, 99, 97), (100, 88, 98, 92)),
          3: ((100, 91, 78, 88), (100, 96, 87, 84)),
          4: ((97, 96, 80, 71), (93, 95, 90, 84)),
          5: ((89, 98, 89, 93), (97, 98, 96, 89))}  # fmt: skip
# per part: the first 90% crossing (req/s) of vLLM and of the plugin; part 5's vLLM is
# below 90% at the grid's lowest rate (censored)
CROSSING = {0: (2.35, 2.75), 1: (2.3, 3.03), 2: (1.8, 1.8), 3: (2.05, 2.7), 4: (2.4, 2.93),
            5: (1.0, 3.86)}  # fmt: skip


def _part(k: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"vs-vllm-plugin-r3-part-{k}.json").read_text())
    return data


def _ttft_means(rate: float, engine: str) -> list[float]:
    rows = [r for k in RAN for r in _part(k)["rows"] if (r["rate"], r["engine"]) == (rate, engine)]
    return [r["metrics"]["ttft_mean"] for r in rows]


@pytest.mark.parametrize("k", RAN)
def test_each_part_ran_its_repeat_of_the_committed_config_on_one_commit_and_machine(
    k: int,
) -> None:
    part = _part(k)
    # quiet at every cell: the 1-minute load at a cell's start carries the cell run just before
    # it (no pause between cells); 2.5, not 2.0, a bound set after part 4's 2.4 (as r5's)
    check_plugin_part(part, CONFIG, k, OURS, "augserve-slo", max_load=2.5)
    assert part["commit"] == _part(0)["commit"] and part["cpu"] == _part(0)["cpu"]


@pytest.mark.parametrize("k", RAN)
def test_the_attainments_and_crossings_the_docs_state(k: int) -> None:
    got = attainments(_part(k))
    vllm, ours = STATED[k]
    assert tuple(got[(r, "vllm")] for r in RATES) == vllm
    assert tuple(got[(r, OURS)] for r in RATES) == ours
    crossed = (part_crossing(_part(k), "vllm"), part_crossing(_part(k), OURS))
    assert tuple(round(c.rate, 2) for c in crossed) == CROSSING[k]
    assert [c.censored for c in crossed] == (["below", ""] if k == 5 else ["", ""])


def test_the_merged_run_is_the_six_parts_and_nothing_else() -> None:
    parts = sorted(DATA.glob("vs-vllm-plugin-r3-part-*.json"))
    assert [int(p.stem.rsplit("-", 1)[1]) for p in parts] == list(RAN)
    result = read(MERGED)
    assert result["config"] == "benchmarks/configs/vs-vllm-plugin-r3.json"
    check_merged(result, CONFIG, [DATA / f"vs-vllm-plugin-r3-part-{k}.json" for k in RAN])
    assert result["memory"]["augserve_host_tokens"] == 0
    cells = {(c["rate"], c["engine"]): c for c in result["cells"]}
    assert set(cells) == {(r, e) for r in RATES for e in ("vllm", OURS)}
    assert all(max(c["load"]) < 2.5 for c in cells.values())


def test_the_capacities_and_ratio_the_docs_state() -> None:
    """docs/results-vllm-plugin.md: the plugin 3.19 req/s [2.15, 3.54] (mean of repeats 2.85), vLLM
    2.40 (censored: below the grid in repeat 5); ratio 1.33x, censored, per repeat 1.17 /
    1.31 / 1.00 / 1.32 / 1.22 / at least 3.86; the conservative lower end's mean 1.65 and
    95% low end 0.50: not established. The plugin's crossing is at or above vLLM's in every
    repeat (one tie)."""
    result = read(MERGED)
    again = capacities(result["cells"])
    assert again["capacity"] == result["capacity"]
    assert again["capacity_ratio"] == result["capacity_ratio"]
    v, p = result["capacity"]["vllm"], result["capacity"][OURS]
    assert (round(v["rate"], 2), v["censored"]) == (2.4, "repeat")
    assert v["per_repeat_censored"] == ["", "", "", "", "", "below"]
    assert (round(p["rate"], 2), p["censored"]) == (3.19, "")
    iv = p["interval"]
    assert (round(iv["low"], 2), round(iv["high"], 2), round(iv["mean"], 2)) == (2.15, 3.54, 2.85)
    ratio = result["capacity_ratio"][OURS]
    assert round(ratio["ratio"], 2) == 1.33 and ratio["censored"]
    assert [round(x, 2) for x in ratio["per_repeat"]] == [1.17, 1.31, 1.0, 1.32, 1.22, 3.86]
    assert all(x >= 1.0 for x in ratio["per_repeat"])
    low = ratio["lower_bound"]
    assert (round(low["mean"], 2), round(low["low"], 2)) == (1.65, 0.5) and low["low"] < 1.0
    # a reading chosen after seeing the data (said so in the docs): the five uncensored
    # repeats only, which drops the largest ratio
    five = mean_interval(ratio["per_repeat"][:5])
    assert (round(five.mean, 2), round(five.low, 2), round(five.high, 2)) == (1.21, 1.04, 1.37)


def test_where_the_plugin_is_ahead_and_where_not() -> None:
    """docs/results-vllm-plugin.md: mean attainment 98 / 95 / 91 / 85% against vLLM's 98 / 94 / 84 /
    87%; at 3.0 req/s the plugin is ahead in 5 of 6 repeats (goodput 2.62 vs 2.41), at 4.0
    behind in 5 of 6 (3.60 vs 3.68), with the higher mean time to first token in 5 of 6."""
    result = read(MERGED)
    cells = {(c["rate"], c["engine"]): c for c in result["cells"]}
    means = {k: round(100 * c["attainment_interval"]["mean"]) for k, c in cells.items()}
    assert [means[(r, OURS)] for r in RATES] == [98, 95, 91, 85]
    assert [means[(r, "vllm")] for r in RATES] == [98, 94, 84, 87]

    def ahead(rate: float) -> tuple[int, int]:
        ours, vllm = cells[(rate, OURS)]["attainment"], cells[(rate, "vllm")]["attainment"]
        diff = [a - b for a, b in zip(ours, vllm, strict=True)]
        return sum(d > 0 for d in diff), sum(d < 0 for d in diff)

    assert ahead(3.0) == (5, 1) and ahead(4.0) == (1, 5)
    # the mean time to first token: the plugin's the lower at 3.0 in all six, the higher at
    # 4.0 in five of six
    for rate, lower, higher in ((3.0, 6, 0), (4.0, 1, 5)):
        pairs = list(zip(_ttft_means(rate, OURS), _ttft_means(rate, "vllm"), strict=True))
        assert (sum(a < b for a, b in pairs), sum(a > b for a, b in pairs)) == (lower, higher)
    good = {k: round(c["goodput_interval"]["mean"], 2) for k, c in cells.items()}
    assert (good[(3.0, OURS)], good[(3.0, "vllm")]) == (2.62, 2.41)
    assert (good[(4.0, OURS)], good[(4.0, "vllm")]) == (3.6, 3.68)


def test_what_the_plugin_changed_in_part_5_by_its_own_counters() -> None:
    """docs/results-vllm-plugin.md: in part 5's server log (the one kept) the admission gate closed
    in none of 25,292 steps, the step budget was below T_max in 21, and 7 client turns had
    their KV held for the session's next turn; what the plugin changed there is the order
    vLLM saw the waiting requests in."""
    log = (DATA / "vs-vllm-plugin-r3-part-5-plugin-stats.log").read_text().splitlines()
    pat = re.compile(r"augserve: (\d+) steps, mean budget \d+ \((\d+) below T_max, (\d+) gated\)")
    counts = [tuple(int(x) for x in m.groups()) for m in map(pat.search, log) if m]
    assert len(counts) == len(log) == 22
    steps, below, gated = (sum(c[i] for c in counts) for i in range(3))
    assert (steps, below, gated) == (25292, 21, 0)
    assert "{'held': 7, 'taken_over': 4, 'expired': 3, 'pressure': 0}" in log[-1]
