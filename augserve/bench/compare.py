"""Compare one policy against the others over a sweep, next to the paper's numbers.

    python -m augserve.bench.compare runs/main/results.json [--ref augserve]

prints Markdown: the per-rate table of goodput, TTFT and normalized latency,
and the geometric-mean goodput ratio of `ref` to each baseline over the rates
(rates where a baseline's goodput is 0 are left out of its geomean), with the
mean TTFT / normalized-latency reductions, beside the paper's section-8 claims.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from augserve.bench.report import read_json_rows
from augserve.bench.reproduce.tables import GOODPUT_FLOOR

# AugServe vs baseline, paper section 8 (geomean goodput ratio; TTFT / norm. latency change)
PAPER = {
    "vllm": ("6.5x (fig. 7: 7.5x)", "-95.6%", "-77.8%"),
    "infercept": ("4.7x (fig. 7: 5.7x)", "-96.0%", "-72.8%"),
    "ssjf": ("1.9x (fig. 7)", "-92.5%", "-36.5%"),
    "mars": ("3.07x (D.6)", "-", "-"),
}


def _by(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[float, Mapping[str, Any]]]:
    out: dict[str, dict[float, Mapping[str, Any]]] = {}
    for r in rows:
        out.setdefault(str(r["policy"]), {})[float(r["rate"])] = r
    return out


def _geomean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _count(row: Mapping[str, Any]) -> str:
    n = row.get("num_met_slo")
    return "?" if n is None else f"{int(n)}"


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def sweep_table(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = [
        "| policy | rate | goodput | SLO att. | TTFT mean | TTFT p99 | norm. lat. mean "
        "| norm. lat. p95 | finished | sched CPU ms/iter |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['policy']} | {float(r['rate']):g} | {_fmt(r.get('goodput'), '.3f')} "
            f"| {_fmt(r.get('slo_attainment'), '.3f')} | {_fmt(r.get('ttft_mean'), '.3f')} "
            f"| {_fmt(r.get('ttft_p99'), '.2f')} | {_fmt(r.get('norm_latency_mean'), '.4f')} "
            f"| {_fmt(r.get('norm_latency_p95'), '.4f')} "
            f"| {_fmt(r.get('finished_share'), '.3f')} "
            f"| {_fmt(r.get('sched_cpu_ms_per_iter'), '.3f')} |"
        )
    return "\n".join(lines)


def ratio_table(rows: Sequence[Mapping[str, Any]], ref: str = "augserve") -> str:
    by = _by(rows)
    if ref not in by:
        raise ValueError(f"no rows for policy {ref!r}")
    lines = [
        f"| {ref} vs | goodput ratio (geomean) | per rate | TTFT change | norm. lat. change "
        "| paper: goodput | paper: TTFT | paper: norm. lat. |",
        "|---|---|---|---|---|---|---|---|",
    ]
    mine = by[ref]
    for base, pts in by.items():
        if base == ref:
            continue
        rates = sorted(set(pts) & set(mine))
        # a baseline below the floor is a count, not a denominator: left out of the geomean
        ratios = {
            r: mine[r]["goodput"] / pts[r]["goodput"]
            for r in rates
            if pts[r]["goodput"] >= GOODPUT_FLOOR
        }
        gm = _geomean(list(ratios.values()))
        per = ", ".join(
            f"{r:g}: {ratios[r]:.2f}x"
            if r in ratios
            else f"{r:g}: {_count(mine[r])} vs {_count(pts[r])} met the SLO"
            for r in rates
        )
        ttft = _change(
            [mine[r].get("ttft_mean") for r in rates], [pts[r].get("ttft_mean") for r in rates]
        )
        nl = _change(
            [mine[r].get("norm_latency_mean") for r in rates],
            [pts[r].get("norm_latency_mean") for r in rates],
        )
        paper = PAPER.get(base, ("-", "-", "-"))
        lines.append(
            f"| {base} | {_fmt(gm, '.2f')}x | {per} | {ttft} | {nl} "
            f"| {paper[0]} | {paper[1]} | {paper[2]} |"
        )
    return "\n".join(lines)


def _change(mine: Sequence[Any], base: Sequence[Any]) -> str:
    """Mean over rates of (mine / base - 1), as a percentage."""
    xs = [m / b - 1.0 for m, b in zip(mine, base, strict=True) if m is not None and b]
    return f"{100 * sum(xs) / len(xs):+.1f}%" if xs else "-"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("results", help="results.json written by `augserve bench`")
    ap.add_argument("--ref", default="augserve")
    args = ap.parse_args(argv)
    try:
        rows = read_json_rows(args.results)
    except (OSError, ValueError, KeyError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else f"not a results file ({exc})"
        print(f"compare: error: {args.results}: {reason}", file=sys.stderr)
        return 2
    print(sweep_table(rows))
    print()
    print(ratio_table(rows, args.ref))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
