"""The protocol figure draws what the result file holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from augserve.bench.protocol_plot import plot_protocol, protocol_figure, series  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "docs" / "data" / "vs-vllm-tools-protocol-ts1.json"


def test_the_figure_plots_each_cell_s_mean_interval_and_repeats(tmp_path: Path) -> None:
    result = json.loads(RESULT.read_text())
    fig = protocol_figure(result)
    att, good = fig.axes
    engines = list(dict.fromkeys(c["engine"] for c in result["cells"]))
    from matplotlib.collections import PathCollection

    for ax, key in ((att, "attainment"), (good, "goodput")):
        lines = [c.lines[0] for c in ax.containers]  # one errorbar per system
        assert len(lines) == len(engines)
        for line, engine in zip(lines, engines, strict=True):
            cells = sorted((c for c in result["cells"] if c["engine"] == engine),
                           key=lambda c: c["rate"])  # fmt: skip
            assert list(line.get_ydata()) == pytest.approx([c[f"{key}_interval"]["mean"]
                                                            for c in cells])  # fmt: skip
        dots = [p for c in ax.collections if isinstance(c, PathCollection)
                for p in c.get_offsets()]  # fmt: skip
        want = sorted(v for c in result["cells"] for v in c[key])
        assert sorted(float(p[1]) for p in dots) == pytest.approx(want)  # every repeat
    texts = [t.get_text() for t in att.get_legend().get_texts()]
    assert any("capacity below the grid" in t for t in texts)  # ts1: augserve censored
    assert any("a repeat censored" in t for t in texts)  # vLLM: one repeat censored
    assert att.get_lines()[-1].get_ydata()[0] == 0.9  # the capacity line
    png = plot_protocol(result, tmp_path / "f.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_series_keeps_missing_intervals_as_none() -> None:
    interval = {"mean": 1.0, "low": None, "high": None}
    result = {"cells": [{"rate": 2.0, "engine": "x", "attainment": [1.0],
                         "attainment_interval": interval}]}  # fmt: skip
    s = series(result, "x", "attainment")
    assert s == {"rate": [2.0], "mean": [1.0], "low": [None], "high": [None], "repeats": [[1.0]]}
