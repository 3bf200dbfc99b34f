"""Section 6: mixed workloads (figure 11), Llama-3-70B (figure 12), MARS (figures 13-14, D.6)."""

from __future__ import annotations

from augserve.bench.reproduce import common, figures, paper, spec
from augserve.bench.reproduce.plan import Context, Results, Section, rel
from augserve.bench.reproduce.tables import pct, ratio, section_header, table
from augserve.bench.runner import BenchPoint

NAME = "workloads"
LLAMA = "llama3-70b-4xa100"


def _settings(ctx: Context) -> dict[str, list[common.Setting]]:
    opt = ctx.primary(spec.MAIN_SETUP)
    return {
        "mixed": [(opt, spec.MIXED)],
        "llama": [(ctx.primary(LLAMA), spec.INFERCEPT)],
        "mars": [(opt, spec.INFERCEPT), (opt, spec.MIXED)],
    }


def points(ctx: Context) -> list[BenchPoint]:
    s = _settings(ctx)
    return common.setting_points(ctx, [*s["mixed"], *s["llama"], *s["mars"]])


def _figure(
    ctx: Context, res: Results, settings: list[common.Setting], name: str, title: str
) -> str:
    groups = [
        (f"{spec.WORKLOADS[wl]}, `{prof}`".replace("`", ""), common.sweep_rows(res, ctx, prof, wl))
        for prof, wl in settings
    ]
    if not any(rows for _, rows in groups):
        return ""
    fig = figures.sweep_grid(
        groups, (figures.GOODPUT, figures.TTFT, figures.NL), ctx.fig_dir / f"{name}.png", title
    )
    return f"![{title}]({rel(ctx, fig)})\n"


def render(ctx: Context, res: Results) -> str:
    s = _settings(ctx)
    pts = ctx.seeded(points(ctx))
    out = [
        section_header(
            "6. Mixed workloads (figure 11), Llama-3-70B (figure 12), MARS (figures 13-14, D.6)",
            f"Rate sweeps over {ctx.scale.window:g} s of Poisson arrivals, all seven policies "
            "(with our `augserve-slo`). "
            "Mixed: the INFERCEPT trace with the calls of half the requests disabled (same "
            "prompts and total output, generated in one go), as the paper's D.1.",
            res.missing(pts),
            len(pts),
        ),
        "### Mixed workloads (figure 11)\n",
        _figure(ctx, res, s["mixed"], "fig11-mixed", "Figure 11: mixed workload, OPT-13B/H800"),
    ]
    tab, notes = common.comparison(
        res, ctx, s["mixed"], spec.PAPER_BASELINES + (spec.STRONGEST,), {}
    )
    out += [
        tab + "\n",
        "The paper reports no ratios for figure 11 (AugServe best on every metric); ours above.\n",
        "### Llama-3-70B on 4xA100 (figure 12)\n",
        _figure(ctx, res, s["llama"], "fig12-llama70b", "Figure 12: Llama-3-70B / 4xA100"),
    ]
    tab, _ = common.comparison(
        res, ctx, s["llama"], spec.PAPER_BASELINES + (spec.STRONGEST,), {}, paper_changes=False
    )
    out += [
        tab + "\n",
        "### MARS (figures 13-14, appendix D.6)\n",
        _figure(ctx, res, s["mars"], "fig13-14-mars", "Figures 13-14: with MARS, OPT-13B/H800"),
    ]
    out.append(_mars(ctx, res, s["mars"]))
    return "\n".join(out)


def _mars(ctx: Context, res: Results, settings: list[common.Setting]) -> str:
    mine, theirs, rows = common.pairs(res, ctx, settings, "mars", "goodput", "augserve")
    from augserve.bench.reproduce.tables import GOODPUT_FLOOR, geomean, geomean_change, ratios

    rs = ratios(mine, theirs, GOODPUT_FLOOR)
    gm = geomean(rs)
    finite = [x for x in rs if x != float("inf")]
    ttft = geomean_change(*common.pairs(res, ctx, settings, "mars", "ttft_mean", "augserve")[:2])
    nl = geomean_change(
        *common.pairs(res, ctx, settings, "mars", "norm_latency_mean", "augserve")[:2]
    )
    body = [
        ["goodput ratio (geomean)", ratio(gm), ratio(paper.MARS["goodput_ratio"])],
        ["largest ratio", ratio(max(finite, default=None)), ratio(paper.MARS["max_ratio"])],
        ["TTFT change", pct(ttft), pct(paper.MARS["ttft_change"])],
        ["normalized latency change", pct(nl), pct(paper.MARS["nl_change"])],
    ]
    text = (
        "AugServe against MARS over the INFERCEPT and mixed sweeps:\n\n"
        + table(["", "ours", "paper"], body)
        + "\n"
    )
    if gm is not None and (
        gm / paper.MARS["goodput_ratio"] > 1.5 or paper.MARS["goodput_ratio"] / gm > 1.5
    ):
        text += "\n- " + common.cause("mars", gm, paper.MARS["goodput_ratio"], rows) + "\n"
    return text


SECTION = Section(
    NAME,
    "Mixed workloads (figure 11), Llama-3-70B (figure 12), MARS (figures 13-14)",
    points,
    render,
)
