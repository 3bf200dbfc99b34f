"""Section 3: ablation (paper table 2), beta_high and the two readings of the cost."""

from __future__ import annotations

from augserve.bench.reproduce import paper, spec
from augserve.bench.reproduce.plan import Context, Results, Section
from augserve.bench.reproduce.tables import fmt, section_header, table
from augserve.bench.runner import BenchPoint

NAME = "ablation"


def _point(ctx: Context, label: str, rate: float, prof: str) -> BenchPoint:
    policy, over = spec.ABLATION[label]
    return ctx.table_point(policy, rate, prof, overrides=over)


def points(ctx: Context) -> list[BenchPoint]:
    return [
        _point(ctx, label, rate, prof)
        for prof in ctx.profiles(spec.MAIN_SETUP, NAME)
        for rate in ctx.scale.ablation_rates
        for label in spec.ABLATION
    ]


def _options(label: str) -> str:
    policy, over = spec.ABLATION[label]
    return f"`{policy}`" + "".join(f" `{k}={v}`" for k, v in over)


def render(ctx: Context, res: Results) -> str:
    pts = ctx.seeded(points(ctx))
    out = [
        section_header(
            "3. Ablation (table 2)",
            f"OPT-13B/H800, INFERCEPT trace, {ctx.scale.table_window:g} s of Poisson arrivals "
            "(the paper: 3 req/s only). Base = INFERCEPT; +B = its dynamic token budget alone; "
            "+S = AugServe's state-aware ranking with a static budget; then AugServe as "
            "shipped (beta_high = 1.0, per-iteration cost) against beta_high = 2.0 and against "
            "the cost fixed per segment (Algorithm 1's reading). The option each row sets is "
            "in the last column.",
            res.missing(pts),
            len(pts),
        )
    ]
    notes = []
    for prof in ctx.profiles(spec.MAIN_SETUP, NAME):
        body = []
        for label in spec.ABLATION:
            ref = paper.TABLE2.get(label)
            cells = []
            policy, over = spec.ABLATION[label]
            for rate in ctx.scale.ablation_rates:
                row = res.row(_point(ctx, label, rate, prof))
                mark = spec.FITTED_MARK if not over and spec.fitted(prof, policy, rate) else ""
                cells += [
                    fmt(row and row.get("ttft_mean"), ".2f") + mark,
                    fmt(row and row.get("goodput"), ".2f") + mark,
                ]
            paper_cells = [fmt(ref[0], ".2f"), fmt(ref[1], ".2f")] if ref else ["-", "-"]
            body.append([label, *cells, *paper_cells, _options(label)])
        head = [f"`{prof}`"]
        for rate in ctx.scale.ablation_rates:
            head += [f"TTFT (s) @{rate:g}", f"goodput @{rate:g}"]
        out.append(table([*head, "paper TTFT @3", "paper goodput @3", "options"], body) + "\n")
        notes += _notes(ctx, res, prof)
    out.append(
        "Cells marked (fitted) are the figures the calibrated profile was fitted on "
        "(docs/profiles.md): they match the paper by construction and are no evidence of "
        "reproduction; the report's verdicts leave them out.\n"
    )
    if notes:
        out.append("Differences from the paper (3 req/s):\n\n" + "\n".join(notes) + "\n")
    return "\n".join(out)


def _notes(ctx: Context, res: Results, prof: str) -> list[str]:
    if 3.0 not in ctx.scale.ablation_rates or spec.fitted(prof, "infercept", 3.0):
        return []  # a Base the profile was fitted on is no evidence either way
    base = res.row(_point(ctx, "Base (INFERCEPT)", 3.0, prof))
    aug = res.row(_point(ctx, "AugServe", 3.0, prof))
    if base is None or aug is None:
        return []
    out = []
    p_ttft, p_good = paper.TABLE2["Base (INFERCEPT)"]
    if base["ttft_mean"] < p_ttft / 3:
        out.append(
            f"- `{prof}`: Base TTFT {base['ttft_mean']:.2f} s against the paper's {p_ttft:g} s. "
            "Cause: at 3 req/s this profile's INFERCEPT is far less overloaded than the "
            f"paper's (SLO attainment {100 * base['slo_attainment']:.0f}% here; the paper's "
            f"goodput of {p_good:g} req/s means about 5%), so its queue, and the TTFT it "
            "causes, is much shorter; the higher rates are closer to the paper's regime."
        )
    gain, p_gain = aug["goodput"] / max(base["goodput"], 1e-9), 1.07 / 0.15
    if gain < p_gain / 1.5:
        out.append(
            f"- `{prof}`: AugServe / Base goodput {gain:.2f}x against the paper's "
            f"{p_gain:.1f}x. Cause: the Base meets the SLO for "
            f"{100 * base['slo_attainment']:.0f}% of requests here at 3 req/s (the paper's "
            "about 5%): the load is lighter for the simulated setup; the gap opens with "
            "the rate (the other columns)."
        )
    return out


SECTION = Section(NAME, "Ablation (table 2)", points, render)
