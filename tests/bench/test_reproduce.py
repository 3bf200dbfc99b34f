"""`augserve reproduce`: the experiment data, the run (cache, resume, Ctrl-C), the probes,
the comparisons against the paper, and the report on a tiny scale."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from augserve.bench.reproduce import common, paper, sections, spec
from augserve.bench.reproduce.execute import check_points, run_sections, section_points
from augserve.bench.reproduce.plan import Context, Results, Section
from augserve.bench.reproduce.probes import OCCUPANCY, OVERHEAD
from augserve.bench.reproduce.tables import geomean, geomean_change, ratios
from augserve.bench.runner import BenchPoint, get_backend
from augserve.cli import main
from augserve.profiles import list_profiles


def _ctx(tmp_path: Path, scale: spec.Scale) -> Context:
    return Context(scale, tmp_path, tmp_path, tuple(list_profiles()))


def test_profiles_for_prefers_a_calibrated_profile_and_keeps_the_roofline_one() -> None:
    avail = ("opt-13b-h800", "opt-13b-h800-paper", "gptj-6b-rtx4090")
    assert spec.profiles_for("opt-13b-h800", avail, both=False) == ("opt-13b-h800-paper",)
    assert spec.profiles_for("opt-13b-h800", avail, both=True) == (
        "opt-13b-h800-paper",
        "opt-13b-h800",
    )
    assert spec.profiles_for("gptj-6b-rtx4090", avail, both=True) == ("gptj-6b-rtx4090",)
    assert spec.setup_of("opt-13b-h800-paper") == "opt-13b-h800"


def test_every_section_has_points_and_every_quick_and_full_point_can_run(tmp_path: Path) -> None:
    names = [s.name for s in sections()]
    assert names == [
        "e2e", "budget", "ablation", "predictor", "sensitivity", "workloads", "latency",
        "overhead", "beyond",
    ]  # fmt: skip
    for scale in (spec.QUICK, spec.FULL):
        ctx = _ctx(tmp_path, scale)
        for s in sections():
            assert s.points(ctx), s.name
        points = section_points(ctx, sections())
        assert len(points) == len(set(points))
        ok, errors = check_points(points)
        assert errors == {} and len(ok) == len(points)
    # the full scale runs every policy at every rate of every figure-7 setting
    full = section_points(_ctx(tmp_path, spec.FULL), sections())
    fig7 = {(p.profile, p.workload) for p in full if p.backend == "sim"}
    assert ("vicuna-13b-2xa100", "toolbench-like") in fig7
    assert {p.policy for p in full} == set(spec.POLICIES)


def test_check_points_reports_settings_that_cannot_run() -> None:
    good = spec.point("augserve", 2.0, "opt-13b-h800", spec.INFERCEPT, 10.0, 0.0)
    bad = replace(good, profile="no-such-profile")
    ok, errors = check_points([good, bad])
    assert ok == [good]
    assert len(errors) == 1 and "no-such-profile" in next(iter(errors.values()))


def test_geomean_and_ratios_skip_zero_baselines() -> None:
    assert ratios([2.0, 1.0, 0.0, 3.0], [1.0, 0.0, 0.0, None]) == [2.0, math.inf]
    assert geomean([2.0, 8.0, math.inf, 0.0]) == pytest.approx(4.0)
    assert geomean([]) is None
    assert geomean_change([1.0, 4.0], [2.0, 1.0]) == pytest.approx(math.sqrt(2) - 1)


def test_goodput_ratios_over_a_baseline_below_the_floor_are_left_out() -> None:
    from augserve.bench.reproduce.tables import GOODPUT_FLOOR, below_floor

    mine, base = [1.0, 1.0, 1.0, 1.0], [0.5, 0.002, 0.0, GOODPUT_FLOOR]
    assert ratios(mine, base, GOODPUT_FLOOR) == [2.0, 1.0 / GOODPUT_FLOOR]
    assert below_floor(base) == 2
    assert ratios(mine, base) == [2.0, 500.0, math.inf, 1.0 / GOODPUT_FLOOR]  # no floor


def _row(point: BenchPoint, goodput: float, attain: float) -> dict[str, object]:
    return {
        **point.key(),
        "goodput": goodput,
        "slo_attainment": attain,
        "ttft_mean": 1.0 / max(goodput, 0.01),
        "norm_latency_mean": 0.1,
        "discards": 10,
        "num_finished": 5,
    }


def test_comparison_beside_the_paper_names_a_cause_for_a_large_difference(
    tmp_path: Path, tiny_quick: spec.Scale
) -> None:
    ctx = _ctx(tmp_path, tiny_quick)
    settings = [("opt-13b-h800", spec.INFERCEPT)]
    rows = {}
    for p in common.setting_points(ctx, settings):
        # every policy ties AugServe and meets the SLO: ratio 1 against the paper's 4.7
        rows[p] = [_row(p, 1.0, 0.95)]
    res = Results(rows, ctx.scale.seeds)
    tab, notes = common.comparison(res, ctx, settings, ["infercept"], dict(paper.GOODPUT_RATIO))
    assert "| infercept | 1.00x |" in tab and "4.7x" in tab
    assert len(notes) == 1 and "load range" in notes[0] and "1 of 1 settings" in notes[0]
    # vLLM collapsing: ours far above the paper's 6.5x, the cause names the discards
    for p in rows:
        if p.policy == "vllm":
            rows[p] = [_row(p, 0.08, 0.0)]
    res = Results(rows, ctx.scale.seeds)
    tab, notes = common.comparison(res, ctx, settings, ["vllm"], dict(paper.GOODPUT_RATIO))
    assert "12.50x" in tab and "discards the KV cache" in notes[0]
    # below the 0.05 req/s floor the ratio is left out of the geomean and counted
    for p in rows:
        if p.policy == "vllm":
            rows[p] = [_row(p, 0.01, 0.0)]
    res = Results(rows, ctx.scale.seeds)
    tab, notes = common.comparison(res, ctx, settings, ["vllm"], dict(paper.GOODPUT_RATIO))
    assert "| vllm | - | - (1 left out: baseline < 0.05 req/s) |" in tab and not notes


def test_results_average_seeds_and_need_every_seed(tmp_path: Path) -> None:
    p = spec.point("augserve", 2.0, "opt-13b-h800", spec.INFERCEPT, 10.0, 0.0)
    rows = {replace(p, seed=0): [_row(p, 1.0, 0.5)], replace(p, seed=1): [_row(p, 3.0, 0.7)]}
    assert Results(rows, (0, 1)).value(p, "goodput") == pytest.approx(2.0)
    assert Results(rows, (0, 1, 2)).row(p) is None


def test_probes_report_occupancy_series_and_binned_overhead() -> None:
    base = BenchPoint(
        policy="infercept", rate=6.0, workload="infercept-like", window=30.0, drain=10.0
    )
    occ = get_backend(OCCUPANCY)(replace(base, backend=OCCUPANCY))[0]
    assert 0 < len(occ["occ_iteration"]) <= 400
    assert len(occ["occ_device_pct"]) == len(occ["occ_iteration"])
    assert all(0 <= x <= 100 for x in occ["occ_device_pct"] + occ["occ_host_pct"])
    assert max(occ["occ_device_pct"]) > 0 and occ["iterations"] > 0
    ovh = get_backend(OVERHEAD)(replace(base, backend=OVERHEAD, policy="augserve"))[0]
    binned = sum(ovh[f"ovh_bin_{name}_n"] for name, _, _ in paper.PAUSED_BINS)
    assert binned == ovh["ovh_iterations"] == ovh["iterations"] - 1  # the first is not timed
    assert ovh["ovh_wall_ms"] > 0 and ovh["ovh_cpu_ms"] >= 0


# --- the run: cache, resume, Ctrl-C ---------------------------------------------------------
CALLS: list[float] = []
STOP_AT: list[int] = []


def counting(point: BenchPoint) -> list[dict[str, object]]:
    if STOP_AT and len(CALLS) >= STOP_AT[0]:
        raise KeyboardInterrupt  # as if Ctrl-C came during this point
    CALLS.append(point.rate)
    return [{**point.key(), "goodput": point.rate}]


def _counting_section() -> Section:
    def points(ctx: Context) -> list[BenchPoint]:
        return [
            BenchPoint(
                policy="vllm", rate=float(r), workload="infercept-like", window=5.0,
                backend=f"{__name__}:counting",
            )
            for r in range(1, 7)
        ]  # fmt: skip

    return Section("count", "counting", points, lambda ctx, res: "")


def test_run_is_cached_resumes_after_ctrl_c_and_recomputes_nothing(
    tmp_path: Path, tiny_quick: spec.Scale
) -> None:
    ctx, sec = _ctx(tmp_path, tiny_quick), _counting_section()
    CALLS.clear()
    STOP_AT[:] = [4]
    state = run_sections(ctx, [sec], workers=1, progress=False)
    assert state.interrupted and state.computed == 4 and len(state.rows) == 4
    STOP_AT.clear()
    state = run_sections(ctx, [sec], workers=1, progress=False)
    assert not state.interrupted and state.reused == 4 and state.computed == 2
    assert sorted(CALLS) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]  # each point computed once
    state = run_sections(ctx, [sec], workers=1, progress=False)
    assert state.reused == 6 and state.computed == 0 and len(CALLS) == 6


# --- the report, end to end, on a tiny scale -------------------------------------------------
def test_reproduce_cli_writes_the_report_with_the_papers_numbers(
    tmp_path: Path, tiny_quick: spec.Scale, capsys: pytest.CaptureFixture[str]
) -> None:
    out, rep = tmp_path / "work", tmp_path / "report"
    args = ["reproduce", "--quick", "--only", "ablation,overhead", "--workers", "1"]
    args += ["--no-progress", "--out", str(out), "--report-dir", str(rep)]
    assert main(args) == 0
    text = (rep / "report.md").read_text()
    for title in ("## 3. Ablation (table 2)", "## 8. Scheduling overhead (tables 3 and 6)"):
        assert title in text
    # the paper's numbers beside ours; sections not run say how to run them
    assert "306.26" in text and "`segment_cost=true`" in text and "`beta_high=2.0`" in text
    # the calibrated Base at 3 req/s is a cell the profile was fitted on: marked
    base_row = next(line for line in text.splitlines() if line.startswith("| Base (INFERCEPT)"))
    assert base_row.count("(fitted)") == 2  # its TTFT and goodput at 3 req/s
    assert "Not run yet: `augserve reproduce --quick --only e2e`" in text
    assert f"`augserve reproduce --quick --only ablation,overhead --out {out}" in text
    assert (rep / "fig" / "table6-overhead.png").read_bytes()[:4] == b"\x89PNG"
    csv = (rep / "results.csv").read_text().splitlines()
    assert len(csv) == 1 + len(spec.ABLATION) + 4  # 6 ablation rows, 4 overhead policies
    assert not (out / "report.md").exists()
    # a rerun reuses every point
    n = len(spec.ABLATION) + 4
    capsys.readouterr()
    assert main(args) == 0
    assert f"reproduce: {n} points, {n} reused" in capsys.readouterr().err
    again = (rep / "report.md").read_text()
    assert f"{n} distinct points needed by the sections run, {n} reused" in again


def test_reproduce_cli_rejects_an_unknown_section(tmp_path: Path) -> None:
    assert main(["reproduce", "--only", "nope", "--out", str(tmp_path)]) == 2


def test_fitted_cells_are_marked_and_left_out_of_the_verdict(
    tmp_path: Path, tiny_quick: spec.Scale, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert len(spec.fitted("opt-13b-h800-paper", "infercept", 3.0)) == 3  # Tables 2 and 7
    assert spec.fitted("opt-13b-h800-paper", "vllm", 3.0) == ["Table 7, CV 1, vLLM goodput"]
    assert spec.fitted("opt-13b-h800", "infercept", 3.0) == []  # the roofline: not fitted
    assert spec.fitted("opt-13b-h800-paper", "infercept", 4.0) == []
    rates = {**tiny_quick.rates, "opt-13b-h800": (3.0, 4.0)}
    monkeypatch.setitem(spec.SCALES, "quick", replace(tiny_quick, rates=rates))
    ctx = _ctx(tmp_path, spec.SCALES["quick"])
    for prof, left_out in (("opt-13b-h800", 0), ("opt-13b-h800-paper", 1)):
        settings = [(prof, spec.INFERCEPT)]
        rows = {p: [_row(p, 1.0, 0.95)] for p in common.setting_points(ctx, settings)}
        res = Results(rows, ctx.scale.seeds)
        assert common.rates_for(ctx, prof, spec.INFERCEPT) == (3.0, 4.0)
        for base in ("infercept", "vllm", "mars"):
            _, _, kept = common.pairs(res, ctx, settings, base, "goodput", "augserve")
            assert len(kept) == 2 - (left_out if base != "mars" else 0), (prof, base)


def test_beta_note_sets_the_papers_beta_and_1e_6_beside_mars(
    tmp_path: Path, tiny_quick: spec.Scale
) -> None:
    from augserve.bench.reproduce import s_sensitivity as sens

    ctx = _ctx(tmp_path, replace(tiny_quick, beta_rates=(3.0,), burst_rates=(3.0,)))
    r = 3.0
    goodput = {1e-3: 0.3, 1e-4: 0.9, 5e-5: 1.17, 1e-5: 1.5, 1e-6: 1.68}
    rows = {
        sens._beta(ctx, b, r): [_row(sens._beta(ctx, b, r), g, 0.4)] for b, g in goodput.items()
    }
    for p in rows:
        rows[p][0]["ttft_p99"] = 10.0
    mars = sens._burst(ctx, "mars", r, 1.0)
    rows[mars] = [_row(mars, 1.23, 0.4)]
    note = sens._beta_note(ctx, Results(rows, ctx.scale.seeds))
    assert "Against MARS (1.23 req/s at this rate)" in note
    assert "gives 1.17, below it" in note and "gives 1.68, above it" in note
