"""The soak's memory samples: what the server records, and the slopes reported."""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from soak_memory import (  # noqa: E402
    MemorySampler,
    malloc_stats,
    memory_report,
    robust_slope_per_hour,
    slope_per_hour,
    window_floors,
)


def _engine(cache_bytes: int) -> SimpleNamespace:
    cache = SimpleNamespace(bytes=cache_bytes)
    return SimpleNamespace(masker=SimpleNamespace(built=SimpleNamespace(cache=cache)))


def test_the_slope_is_mib_per_hour() -> None:
    points = [(0.0, 100.0), (1800.0, 105.0), (3600.0, 110.0)]
    assert slope_per_hour(points) == pytest.approx(10.0)
    assert slope_per_hour(points[:2]) == 0.0  # too few points to fit


def test_a_spike_moves_least_squares_but_not_the_robust_slope() -> None:
    # flat at 500 MiB for an hour but for one transient 40 MiB spike at the end
    points = [(float(t), 500.0) for t in range(0, 3600, 120)] + [(3600.0, 540.0)]
    assert slope_per_hour(points) > 5.0
    assert robust_slope_per_hour(points) == pytest.approx(0.0, abs=1e-9)
    growing = [(float(t), 500 + 6 * t / 3600) for t in range(0, 3600, 120)]
    assert robust_slope_per_hour(growing) == pytest.approx(6.0)
    assert robust_slope_per_hour(growing[:2]) == 0.0


def test_the_floor_of_each_window_is_its_lowest_sample() -> None:
    points = [(0.0, 10.0), (100.0, 7.0), (299.0, 12.0), (300.0, 9.0), (650.0, 8.0)]
    assert window_floors(points, 300.0) == [7.0, 9.0, 8.0]
    assert window_floors([], 300.0) == []


def test_a_sample_records_rss_the_grammar_cache_and_the_heap(tmp_path: Path) -> None:
    engine = _engine(3 * 2**20)
    sampler = MemorySampler(engine, tmp_path / "m.json", 1.0, trace=False)
    sampler.sample()
    engine.masker.built.cache.bytes = 5 * 2**20
    sampler.sample()
    samples = json.loads((tmp_path / "m.json").read_text())["samples"]
    assert [s["grammar_cache"] for s in samples] == [3.0, 5.0]
    assert all(s["rss"] > 10 for s in samples)  # a Python process holds more than 10 MiB
    if malloc_stats():  # glibc >= 2.33
        assert all(s["malloc_used"] > 0 and s["malloc_free"] >= 0 for s in samples)
    if Path("/proc/self/smaps_rollup").exists():
        for s in samples:  # anonymous + file-backed make up the resident set
            assert s["rss_anon"] > 0 and s["rss_file"] > 0
            assert s["rss_anon"] + s["rss_file"] == pytest.approx(s["rss"], rel=0.1)
    assert samples[0]["py_blocks"] > 1  # thousands of blocks: any Python process has more
    # 20,000 more objects: 20 thousand more blocks, with no collection in between (a
    # collection of the engine's garbage once freed 9 thousand: CI, 2026-12-04)
    gc.collect()
    gc.disable()
    try:
        sampler.sample()
        held = [object() for _ in range(20_000)]
        sampler.sample()
    finally:
        gc.enable()
    last = json.loads((tmp_path / "m.json").read_text())["samples"][-2:]
    assert last[1]["py_blocks"] - last[0]["py_blocks"] >= 19
    del held


def test_no_masker_means_no_grammar_cache(tmp_path: Path) -> None:
    sampler = MemorySampler(SimpleNamespace(), tmp_path / "m.json", 1.0, trace=False)
    sampler.sample()
    assert json.loads((tmp_path / "m.json").read_text())["samples"][0]["grammar_cache"] == 0.0


def test_rss_growth_the_cache_explains_has_no_slope_left(tmp_path: Path) -> None:
    # RSS grows 20 MiB an hour, all of it the grammar cache filling: nothing left over
    samples = [{"t": t, "rss": 400 + 20 * t / 3600, "grammar_cache": 20 * t / 3600}
               for t in range(0, 3600, 300)]  # fmt: skip
    samples.insert(0, {"t": -1.0, "rss": 900.0, "grammar_cache": 0.0})  # warm-up: dropped
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"samples": samples}))
    slopes = memory_report(path, after_s=0.0)["slopes_mib_per_hour"]
    assert slopes["rss"] == pytest.approx(20.0)
    assert slopes["grammar_cache"] == pytest.approx(20.0)
    assert slopes["rss_less_grammar_cache"] == pytest.approx(0.0, abs=1e-6)
    assert "anon_outside_malloc" not in slopes  # no anonymous / heap samples: not computed
    report = memory_report(path, after_s=0.0)
    assert report["robust_slopes_mib_per_hour"]["rss"] == pytest.approx(20.0)
    assert len(report["samples"]) == len(samples)  # the warm-up's sample kept, unfitted
    floors = report["window_floors_mib"]["rss"]
    assert len(floors) == 12 and floors == sorted(floors)  # one per 300 s, rising


def test_anonymous_memory_outside_the_heap_has_its_own_slope(tmp_path: Path) -> None:
    # glibc's heap flat; anonymous memory grows 12 MiB an hour: outside malloc, 12
    samples = [{"t": t, "rss": 500.0, "grammar_cache": 0.0, "malloc_used": 170.0,
                "malloc_free": 5.0, "rss_anon": 300 + 12 * t / 3600, "rss_file": 200.0}
               for t in range(0, 3600, 300)]  # fmt: skip
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"samples": samples}))
    slopes = memory_report(path, after_s=0.0)["slopes_mib_per_hour"]
    assert slopes["anon_outside_malloc"] == pytest.approx(12.0)
    assert slopes["malloc_used"] == pytest.approx(0.0, abs=1e-6)


def test_tracemalloc_names_the_line_that_grew(tmp_path: Path) -> None:
    import tracemalloc

    sampler = MemorySampler(SimpleNamespace(), tmp_path / "m.json", 1.0, trace=True)
    try:
        sampler.sample()
        hoard = [bytearray(4096) for _ in range(512)]  # 2 MiB held on this line
        sampler.sample()
    finally:
        tracemalloc.stop()
    data = json.loads((tmp_path / "m.json").read_text())
    top = data["py_top_growth"][0]
    assert "test_soak_memory.py" in top["where"] and top["size_diff_mib"] >= 2.0
    assert data["samples"][1]["py_traced"] - data["samples"][0]["py_traced"] >= 2.0
    assert len(hoard) == 512
    assert memory_report(tmp_path / "m.json", 0.0)["py_top_growth"][0]["where"] == top["where"]


def test_the_hostile_weight_goes_to_the_kinds_asked_for() -> None:
    from soak_server import HOSTILE, hostile_weights

    every = hostile_weights(0.4)
    assert [every[k] for k in HOSTILE] == pytest.approx([0.1] * 4)
    one = hostile_weights(0.4, ["schema"])
    assert one["hostile_schema"] == pytest.approx(0.4)
    assert sum(one[k] for k in HOSTILE) == pytest.approx(0.4)
    assert one["plain"] == every["plain"] > 0  # the other scenarios keep their weights
    with pytest.raises(ValueError, match="hostile_kinds"):
        hostile_weights(0.4, ["schemas"])
