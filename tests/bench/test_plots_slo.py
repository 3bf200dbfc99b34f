"""`bench.png`: each panel says which way is better, and the latency panels draw the
SLO the table was judged by."""

from __future__ import annotations

from pathlib import Path

from augserve.bench.plots import plot_sweep, sweep_figure

ROWS = [
    {"policy": p, "rate": r, "goodput": g, "ttft_mean": t, "norm_latency_mean": n,
     "ttft_slo": 1.5, "norm_latency_slo": 0.2}
    for p, r, g, t, n in (
        ("vllm", 2.0, 1.5, 0.1, 0.05), ("vllm", 3.0, 1.0, 2.0, 0.3),
        ("augserve", 2.0, 1.6, 0.08, 0.02), ("augserve", 3.0, 2.4, 0.09, 0.03),
    )
]  # fmt: skip


def test_panels_say_which_way_is_better_and_draw_the_slo(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = sweep_figure(ROWS)
    goodput, ttft, nl = fig.axes[:3]
    assert goodput.get_title() == "higher is better"
    assert ttft.get_title() == nl.get_title() == "lower is better"
    for ax, slo in ((ttft, 1.5), (nl, 0.2)):
        (line,) = [ln for ln in ax.get_lines() if ln.get_label().startswith("SLO")]
        assert set(line.get_ydata()) == {slo}
    assert not [ln for ln in goodput.get_lines() if ln.get_label().startswith("SLO")]
    plt.close(fig)
    out = plot_sweep(ROWS, tmp_path / "bench.png")
    assert out.stat().st_size > 1000
