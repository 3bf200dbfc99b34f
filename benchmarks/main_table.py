"""The README's main table, from the committed simulator data: goodput at each rate,
the paper's point (the rate where vLLM meets about half its SLO), fitted cells left out.

    python benchmarks/main_table.py            # print the tables
    python benchmarks/main_table.py --write    # and replace them in docs/results-main.md

Reads `docs/data/main-comparison/main.csv` (oracle), `docs/data/main-comparison-online/`
(online; 1800 s windows) and `docs/reproduce/full/results.csv` (the full report, 900 s
windows). No simulation runs. Past vLLM's collapse, its goodput is a fixed early
count of requests that met the SLO, divided by the window. A ratio there grows with
the window, not with the scheduler, so none is quoted past the half-SLO point.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN = {"oracle": ROOT / "docs/data/main-comparison/main.csv",
        "online": ROOT / "docs/data/main-comparison-online/main.csv"}  # fmt: skip
FULL = ROOT / "docs/reproduce/full/results.csv"
PAGE = ROOT / "docs/results-main.md"
START, END = "<!-- main-table:start -->", "<!-- main-table:end -->"
# (profile, policy, rate): the cells `opt-13b-h800-paper` was fitted on (docs/profiles.md)
FITTED = {("opt-13b-h800-paper", "vllm", 3.0), ("opt-13b-h800-paper", "infercept", 3.0)}
HALF = (0.25, 0.75)  # "about half": vLLM's attainment within this band

Row = dict[str, str]


def read(path: Path) -> list[Row]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def half_rate(vllm: Sequence[Row]) -> Row | None:
    """vLLM's row whose attainment is nearest 50%, if within `HALF` (else None)."""
    near = [r for r in vllm if HALF[0] <= float(r["slo_attainment"]) <= HALF[1]]
    return min(near, key=lambda r: abs(float(r["slo_attainment"]) - 0.5), default=None)


def per_rate(rows: Sequence[Row], profile: str) -> list[str]:
    """Markdown rows: per rate, AugServe's and vLLM's goodput, met counts, the ratio."""
    by = {(r["policy"], float(r["rate"])): r for r in rows if r["profile"] == profile}
    out = []
    for rate in sorted({k[1] for k in by}):
        a, v = by.get(("augserve", rate)), by.get(("vllm", rate))
        if a is None or v is None:
            continue
        ga, gv = float(a["goodput"]), float(v["goodput"])
        att = float(v["slo_attainment"])
        if (profile, "vllm", rate) in FITTED:
            ratio = "left out (fitted cell)"
        elif att < HALF[0]:
            ratio = f"not quoted (vLLM meets {att:.1%}: past its collapse)"
        else:
            ratio = f"{ga / gv:.2f}x"
        out.append(f"| {profile} | {rate:g} | {ga:.3f} ({a['num_met_slo']}) | "
                   f"{gv:.3f} ({v['num_met_slo']}) | {att:.1%} | {ratio} |")  # fmt: skip
    return out


def main_tables() -> list[str]:
    lines = []
    for pred, path in MAIN.items():
        rows = read(path)
        lines += ["", f"**{pred} predictor** (`{path.relative_to(ROOT)}`, 1800 s windows)", "",
                  "| profile | rate | AugServe goodput (met) | vLLM goodput (met) | "
                  "vLLM SLO att. | AugServe / vLLM |", "|---|---|---|---|---|---|"]  # fmt: skip
        for profile in sorted({r["profile"] for r in rows}):
            lines += per_rate(rows, profile)
    return lines


def full_report_points() -> list[str]:
    """Per setup of the full report (900 s, seed 0, oracle, default settings): the rate
    where vLLM meets about half its SLO and AugServe / vLLM there."""
    rows = [r for r in read(FULL) if not r["overrides"] and not r["beta"] and r["seed"] == "0"
            and r["window"] == "900.0" and r["predictor"] == "oracle"]  # fmt: skip
    setups = sorted({(r["workload"], r["profile"]) for r in rows})
    lines = ["", "**The paper's point in the full report** (`docs/reproduce/full/results.csv`, "
             "900 s windows): the rate where vLLM meets about half its SLO (25-75%)", "",
             "| workload | profile | rate | vLLM SLO att. | AugServe goodput | vLLM goodput | "
             "AugServe / vLLM |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    ratios = []
    for wl, prof in setups:
        mine = [r for r in rows if (r["workload"], r["profile"]) == (wl, prof)]
        v = half_rate([r for r in mine if r["policy"] == "vllm"])
        a = (
            None
            if v is None
            else next(
                (r for r in mine if r["policy"] == "augserve" and r["rate"] == v["rate"]), None
            )
        )
        if v is None or a is None or (prof, "vllm", float(v["rate"])) in FITTED:
            lines.append(f"| {wl} | {prof} | - | no rate of the grid | - | - | - |")
            continue
        ratio = float(a["goodput"]) / float(v["goodput"])
        ratios.append(ratio)
        lines.append(f"| {wl} | {prof} | {float(v['rate']):g} | "
                     f"{float(v['slo_attainment']):.1%} | {float(a['goodput']):.3f} | "
                     f"{float(v['goodput']):.3f} | {ratio:.2f}x |")  # fmt: skip
    if ratios:
        geo = 1.0
        for x in ratios:
            geo *= x
        lines += ["", f"Geomean over these {len(ratios)} setups: "
                  f"**{geo ** (1 / len(ratios)):.2f}x** (range {min(ratios):.2f}-"
                  f"{max(ratios):.2f}x)."]  # fmt: skip
    return lines


def window_check() -> list[str]:
    """vLLM's met counts at 900 s (full report) and 1800 s (main comparison), same rate."""
    full = {(r["profile"], float(r["rate"])): r for r in read(FULL) if r["policy"] == "vllm"
            and r["window"] == "900.0" and not r["overrides"] and not r["beta"]
            and r["workload"] == "infercept" and r["seed"] == "0"}  # fmt: skip
    main = {(r["profile"], float(r["rate"])): r for r in read(MAIN["oracle"])
            if r["policy"] == "vllm"}  # fmt: skip
    pairs = [(k, full[k]["num_met_slo"], main[k]["num_met_slo"]) for k in sorted(main)
             if k in full]  # fmt: skip
    cells = ", ".join(f"{p} {r:g} req/s: {a} vs {b}" for (p, r), a, b in pairs)
    return ["", f"vLLM's requests within the SLO at 900 s vs 1800 s, same rate: {cells}."]


def tables() -> str:
    return "\n".join([*main_tables(), *full_report_points(), *window_check()]).strip() + "\n"


def write(page: Path, body: str) -> None:
    text = page.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{page}: no {START} ... {END} block")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    page.write_text(f"{head}{START}\n{body}{END}{tail}", encoding="utf-8")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true", help=f"replace the block in {PAGE.name}")
    args = p.parse_args()
    body = tables()
    print(body)
    if args.write:
        write(PAGE, body)


if __name__ == "__main__":
    main()
