"""benchmarks/main_table.py: docs/results-main.md's main table is what the committed data
gives, and no ratio is quoted past vLLM's collapse or on a fitted cell."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import main_table as mt  # noqa: E402


def test_the_page_holds_the_tables_the_data_gives() -> None:
    page = mt.PAGE.read_text(encoding="utf-8")
    block = page.split(mt.START, 1)[1].split(mt.END, 1)[0]
    assert block.strip() == mt.tables().strip()  # rerun `main_table.py --write`


def test_no_ratio_past_the_collapse_nor_on_the_fitted_cell() -> None:
    rows = mt.read(mt.MAIN["oracle"])
    lines = mt.per_rate(rows, "opt-13b-h800") + mt.per_rate(rows, "opt-13b-h800-paper")
    assert len(lines) == 8 and not any(line.endswith("x |") for line in lines)
    assert "| opt-13b-h800 | 3 | 2.849 (5128) | 0.261 (470) | 8.8% | not quoted" in lines[0]
    assert "left out (fitted cell)" in lines[4]


def test_the_papers_point_is_the_grid_rate_nearest_half() -> None:
    vllm = [{"rate": "1", "slo_attainment": "0.9"}, {"rate": "2", "slo_attainment": "0.3"},
            {"rate": "3", "slo_attainment": "0.6"}]  # fmt: skip
    assert mt.half_rate(vllm) == vllm[2]
    assert mt.half_rate(vllm[:1]) is None
    text = "\n".join(mt.full_report_points())
    # gptj-6b-rtx4090, infercept, 1 req/s: vLLM 34.4%, AugServe 0.874 / 0.333 req/s
    assert "| infercept | gptj-6b-rtx4090 | 1 | 34.4% | 0.874 | 0.333 | 2.62x |" in text
    assert "**2.65x** (range 1.67-3.62x)" in text
