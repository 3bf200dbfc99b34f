"""The comparison configs committed before their runs (docs/benchmarking.md): each loads
(every field valid), is named after its file, and a sensitivity config differs from the
headline config it varies only where its comment says."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from augserve.bench.protocol import load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "benchmarks" / "configs"
sys.path.insert(0, str(ROOT / "benchmarks" / "vs_vllm"))

from engine_protocol import load_engine_config  # noqa: E402


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_each_config_loads_and_is_named_after_its_file(path: Path) -> None:
    """A serving comparison's config (protocol.load_config), or an engine-throughput
    one (`settings.engines`: engine_protocol.load_engine_config)."""
    if "engines" in json.loads(path.read_text()).get("settings", {}):
        assert load_engine_config(path)[0].name == path.stem
    else:
        cfg = load_config(path)
        assert cfg.name == json.loads(path.read_text())["name"] == path.stem
        assert cfg.slo.source  # every serving config says where its SLO came from


ROWS = [("vs-vllm-tools-r4", 0.3), ("vs-vllm-tools-r4", 0.1),
        ("vs-vllm-agent-sessions-q5", 0.3), ("vs-vllm-agent-sessions-q5", 0.1)]  # fmt: skip


@pytest.mark.parametrize(("headline", "scale"), ROWS)
def test_the_time_scale_rows_vary_their_headline_only_in_time_scale_and_grid(
    headline: str, scale: float
) -> None:
    base = json.loads((CONFIGS / f"{headline}.json").read_text())
    row = json.loads((CONFIGS / f"{headline}-ts{scale}.json").read_text())
    changed = {k for k in base.keys() | row.keys() if base.get(k) != row.get(k)}
    assert changed <= {"name", "comment", "time_scale", "rates", "split"}
    assert {"name", "comment", "time_scale", "rates"} <= changed
    assert row["split"] == [[0], [1], [2]]
    n = len(base["rates"])
    assert row["time_scale"] == scale and row["rates"][:n] == base["rates"]
    assert len(row["rates"]) == n + 1 and row["rates"][-1] > base["rates"][-1]
    assert row["slo"] == base["slo"] and row["memory"] == base["memory"]
    assert row["comment"].startswith("NOT RUN YET")


def test_the_served_path_r3_is_r2_read_on_the_servers() -> None:
    base = json.loads((CONFIGS / "vs-vllm-serve-engine-vllm-r2.json").read_text())
    row = json.loads((CONFIGS / "vs-vllm-serve-engine-vllm-r3.json").read_text())
    changed = {k for k in base.keys() | row.keys() if base.get(k) != row.get(k)}
    assert changed == {"name", "comment", "settings"}
    settings = {k for k in base["settings"].keys() | row["settings"].keys()
                if base["settings"].get(k) != row["settings"].get(k)}  # fmt: skip
    assert settings == {"measure"} and row["settings"]["measure"] == "server"
    assert row["comment"].startswith("NOT RUN YET")


def test_the_served_path_r4_is_r3_with_one_more_rate() -> None:
    base = json.loads((CONFIGS / "vs-vllm-serve-engine-vllm-r3.json").read_text())
    row = json.loads((CONFIGS / "vs-vllm-serve-engine-vllm-r4.json").read_text())
    changed = {k for k in base.keys() | row.keys() if base.get(k) != row.get(k)}
    assert changed == {"name", "comment", "rates"}
    assert row["rates"] == [*base["rates"], 9.0]  # the same draws at r3's rates
    assert row["comment"].startswith("NOT RUN YET")


def test_the_served_path_r5_is_r4_with_six_fresh_repeats() -> None:
    """r5 (issue 40) reads r4's question from six repeats on seeds no earlier run drew,
    each its own part; nothing else moves."""
    base = json.loads((CONFIGS / "vs-vllm-serve-engine-vllm-r4.json").read_text())
    row = json.loads((CONFIGS / "vs-vllm-serve-engine-vllm-r5.json").read_text())
    changed = {k for k in base.keys() | row.keys() if base.get(k) != row.get(k)}
    assert changed == {"name", "comment", "seeds", "split"}
    assert row["seeds"] == [3, 4, 5, 6, 7, 8] and not set(row["seeds"]) & set(base["seeds"])
    assert row["split"] == [[k] for k in range(6)]
    assert row["comment"].startswith("NOT RUN YET")


def test_the_tool_headline_r5_is_r4_with_two_rates_above_and_fresh_seeds() -> None:
    """r5 (issue 36) gives the tool headline's capacity ratio an interval: r4's grid with
    9.0 and 12.0 req/s above it, seeds no earlier run at this scale drew, in three parts."""
    base = json.loads((CONFIGS / "vs-vllm-tools-r4.json").read_text())
    row = json.loads((CONFIGS / "vs-vllm-tools-r5.json").read_text())
    changed = {k for k in base.keys() | row.keys() if base.get(k) != row.get(k)}
    assert changed == {"name", "comment", "rates", "seeds", "split"}
    assert row["rates"] == [*base["rates"], 9.0, 12.0]
    assert row["seeds"] == [3, 4, 5] and not set(row["seeds"]) & set(base["seeds"])
    assert row["split"] == [[0], [1], [2]] and row["time_scale"] == 1.0
    assert row["comment"].startswith("NOT RUN YET")


def test_the_plugin_r4_is_r3_with_longer_cells_and_fresh_seeds() -> None:
    """r4 (issue 40) asks r3's question with three times the arrivals a cell, on six
    seeds no earlier plugin run drew, one part each; nothing else moves."""
    base = json.loads((CONFIGS / "vs-vllm-plugin-r3.json").read_text())
    row = json.loads((CONFIGS / "vs-vllm-plugin-r4.json").read_text())
    changed = {k for k in base.keys() | row.keys() if base.get(k) != row.get(k)}
    assert changed == {"name", "comment", "duration_s", "seeds"}
    assert (base["duration_s"], row["duration_s"]) == (30.0, 90.0)
    earlier = {s for r in (1, 2, 3) for s in json.loads(
        (CONFIGS / f"vs-vllm-plugin-r{r}.json").read_text())["seeds"]}  # fmt: skip
    assert row["seeds"] == list(range(9, 15)) and not set(row["seeds"]) & earlier
    assert row["split"] == [[k] for k in range(6)]
    assert row["comment"].startswith("NOT RUN YET")
