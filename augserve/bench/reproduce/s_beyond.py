"""Section 9, beyond the paper: the highest rate each policy serves with at least 90% SLO
attainment, and who is starved (the longest quartile's completion share)."""

from __future__ import annotations

from augserve.bench.reproduce import common, figures, spec
from augserve.bench.reproduce.plan import Context, Results, Section, rel
from augserve.bench.reproduce.tables import fmt, section_header, table
from augserve.bench.runner import BenchPoint, Row
from augserve.core.metrics import max_rate_at_attainment

NAME = "beyond"
TARGET = 0.9


def points(ctx: Context) -> list[BenchPoint]:
    return common.setting_points(ctx, common.fig7_settings(ctx))


def _capacity(rows: list[Row], rates: tuple[float, ...]) -> str:
    if len(rows) < len(rates):
        return "-"
    best = max_rate_at_attainment(rows, TARGET)
    if best is None:
        return f"< {min(rates):g}"
    return f">= {best:g}" if best == max(rates) else f"{best:g}"


def render(ctx: Context, res: Results) -> str:
    settings = common.fig7_settings(ctx)
    pts = ctx.seeded(points(ctx))
    out = [
        section_header(
            "9. Beyond the paper: capacity at 90% SLO attainment, and who is starved",
            "From the figure-7 sweeps. Capacity: the highest rate of the sweep at which at "
            "least 90% of the arrived requests met the SLO (`< r`: not even the lowest rate; "
            "`>= r`: the highest rate tried still meets it; the grid is the sweep's rates). "
            "Longest quartile: the 25% of requests with the most planned output tokens; the "
            "share of them that finished in the window, against the share of all requests "
            "(a policy that favours short jobs finishes far fewer long ones).",
            res.missing(pts),
            len(pts),
        ),
    ]
    head = ["setup", "workload", *spec.POLICIES]
    cap_body, starve_body = [], []
    for prof, wl in settings:
        rates = common.rates_for(ctx, prof, wl)
        top = max(rates)
        cap, starve = [f"`{prof}`", spec.WORKLOADS[wl]], [f"`{prof}`", spec.WORKLOADS[wl]]
        for pol in spec.POLICIES:
            rows = common.sweep_rows(res, ctx, prof, wl, (pol,))
            cap.append(_capacity(rows, rates))
            row = res.row(spec.point(pol, top, prof, wl, ctx.scale.window, ctx.scale.drain))
            starve.append(
                "-"
                if row is None
                else f"{fmt(100 * row['long_quartile_finished_share'], '.0f')} / "
                f"{fmt(100 * row['finished_share'], '.0f')}"
            )
        cap_body.append(cap)
        starve_body.append(starve)
    out.append("**Highest rate (req/s) with >= 90% SLO attainment**\n")
    out.append(table(head, cap_body) + "\n")
    out.append(
        "**At each sweep's highest rate: longest quartile finished (%) / all finished (%)**\n"
    )
    out.append(table(head, starve_body) + "\n")
    fam = common.families(settings)
    prim = fam.get("calibrated") or fam["roofline"]
    groups = [
        (f"{spec.SETUPS[spec.setup_of(p)]}, {spec.WORKLOADS[w]}", common.sweep_rows(res, ctx, p, w))
        for p, w in prim
    ]
    if any(rows for _, rows in groups):
        fig = figures.sweep_grid(
            groups,
            (figures.ATTAIN, figures.LONGQ),
            ctx.fig_dir / "beyond-capacity-starvation.png",
            "SLO attainment and the longest quartile's completion vs rate",
        )
        out.append(f"![capacity and starvation]({rel(ctx, fig)})\n")
    out.append(_summary(ctx, res, prim))
    return "\n".join(out)


def _summary(ctx: Context, res: Results, settings: list[common.Setting]) -> str:
    """Which policy finishes the fewest long requests at the top rate, most often."""
    worst: dict[str, int] = {}
    for prof, wl in settings:
        top = max(common.rates_for(ctx, prof, wl))
        shares = {
            pol: res.value(
                spec.point(pol, top, prof, wl, ctx.scale.window, ctx.scale.drain),
                "long_quartile_finished_share",
            )
            for pol in spec.POLICIES
        }
        known = {k: v for k, v in shares.items() if v is not None}
        if known:
            w = min(known, key=lambda k: known[k])
            worst[w] = worst.get(w, 0) + 1
    if not worst:
        return ""
    text = ", ".join(f"{pol} in {n}" for pol, n in sorted(worst.items(), key=lambda x: -x[1]))
    return (
        f"Most starved at the highest rate (fewest long requests finished), by setting: "
        f"{text} of {len(settings)}.\n"
    )


SECTION = Section(NAME, "Beyond the paper: capacity and starvation", points, render)
