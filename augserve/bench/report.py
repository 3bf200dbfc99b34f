"""Write metric rows (a list of flat dicts) as JSON and CSV."""

from __future__ import annotations

import csv
import json
import math
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

Row = dict[str, Any]


def git(*args: str) -> str:
    """`git ARGS` run in augserve's checkout, its output stripped; "" when git or the
    checkout is missing (an installed package)."""
    try:
        out = subprocess.run(
            ["git", *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def git_commit() -> str:
    """The checkout's short commit, "" outside a git checkout (benchmarks' provenance)."""
    return git("rev-parse", "--short", "HEAD")


def _clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities become None; enums their value."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "value") and not isinstance(value, int | float | str):
        return value.value
    return value


def columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """All keys, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    return list(seen)


def write_json(path: str | Path, rows: Sequence[Mapping[str, Any]], **meta: Any) -> None:
    """`{"meta": {...}, "rows": [...]}`, or just the list when no meta is given."""
    clean = [{k: _clean(v) for k, v in row.items()} for row in rows]
    payload: Any = {"meta": meta, "rows": clean} if meta else clean
    Path(path).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def write_csv(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """One row per dict; the header is the union of keys; None is written empty."""
    with Path(path).open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns(rows), restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else _clean(v)) for k, v in row.items()})


def read_json_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a file written by `write_json` (with or without meta)."""
    payload = json.loads(Path(path).read_text(encoding="utf-8"))
    rows = payload["rows"] if isinstance(payload, dict) else payload
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected a list of rows")
    return rows


# --- the bench table ---------------------------------------------------------------------
# (row key, header, format, meaning): the columns `augserve bench` prints
TABLE: tuple[tuple[str, str, str, str], ...] = (
    ("policy", "policy", "{}", "scheduling policy"),
    ("rate", "rate", "{:g}", "offered arrival rate (requests/s)"),
    ("goodput", "goodput", "{:.3f}", "requests/s that finished in the window and met the SLO"),
    ("slo_attainment", "SLO", "{:.3f}", "share of the arrived requests that met the SLO"),
    ("throughput_rps", "thru", "{:.3f}", "requests/s that finished in the window"),
    ("ttft_mean", "TTFT", "{:.3f}", "mean time to first token (s), finished requests"),
    ("ttft_p95", "TTFT95", "{:.3f}", "95th percentile of TTFT (s)"),
    ("ttft_p99", "TTFT99", "{:.3f}", "99th percentile of TTFT (s)"),
    (
        "norm_latency_mean",
        "NL",
        "{:.4f}",
        "mean normalized latency: (latency - tool-call time) / generated tokens (s/token)",
    ),
    ("norm_latency_p95", "NL95", "{:.4f}", "95th percentile of NL (s/token)"),
    ("finished_share", "fin", "{:.3f}", "share of the arrived requests that finished in time"),
    (
        "latency_mean",
        "JCT",
        "{:.1f}",
        "mean job completion time (s), arrival to finish of the finished requests (an agent"
        " session is one request)",
    ),
    ("prefix_hit_rate", "hit", "{:.3f}", "prefix cache hits over tokens looked up at admission"),
    (
        "long_quartile_finished_share",
        "longQ",
        "{:.3f}",
        "share of the longest quarter of requests (most output tokens) that finished",
    ),
    ("long_quartile_latency_p99", "longQ99", "{:.1f}", "99th percentile latency (s) of those"),
    (
        "sched_cpu_ms_per_iter",
        "sched_ms",
        "{:.3f}",
        "schedule() CPU time per iteration (ms, the simulating thread; wall: sched_ms_per_iter)",
    ),
)


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as a right-aligned text table of the `TABLE` columns ("-": no value)."""
    header = [h for _, h, _, _ in TABLE]
    body = []
    for row in rows:
        cells = []
        for key, _, fmt, _ in TABLE:
            v = row.get(key)
            cells.append(
                "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)
            )
        body.append(cells)
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) for cells in body]
    return "\n".join(lines)


def table_legend(indent: str = "  ") -> str:
    """One line per column: `header  meaning`."""
    width = max(len(h) for _, h, _, _ in TABLE)
    return "\n".join(f"{indent}{h.ljust(width)}  {meaning}" for _, h, _, meaning in TABLE)


def table_footnote(rows: Sequence[Mapping[str, Any]]) -> str:
    """What the columns mean, and the SLO the rows were measured against."""
    lines = ["", "columns:", table_legend()]
    if rows and rows[0].get("norm_latency_slo"):
        lines.append(
            f"SLO: TTFT < {rows[0].get('ttft_slo'):g} s and NL < "
            f"{rows[0]['norm_latency_slo']:.4f} s/token; '-': no finished request"
        )
    return "\n".join(lines)


# --- everything `augserve bench` writes --------------------------------------------------
def write_sweep(
    out: Path,
    base: Any,
    raw: Sequence[Row],
    progress: tuple[int, int],
    wall: float,
    command: str,
) -> None:
    """The rows `raw` (per seed) of the points that finished, `progress` = (finished,
    total) points of a sweep over the settings of `base` (a BenchPoint): the table and
    its footnote on stdout, and
    results.json / results.csv (averaged over seeds), points.json (per seed) and
    bench.png in `out`. Data first, plot last."""
    from augserve.bench.aggregate import aggregate
    from augserve.bench.plots import plot_sweep

    rows = aggregate(raw)
    finished, total = progress
    meta: dict[str, Any] = {
        "command": command,
        "base": asdict(base),
        "wall_s": wall,
        "points_total": total,
        "points_finished": finished,
        "complete": finished == total,
    }
    if rows:
        meta["norm_latency_slo"] = rows[0].get("norm_latency_slo")
        meta["ttft_slo"] = rows[0].get("ttft_slo")
    write_json(out / "results.json", rows, **meta)
    write_csv(out / "results.csv", rows)
    write_json(out / "points.json", raw, **meta)
    print(format_table(rows))
    print(table_footnote(rows), flush=True)
    title = f"{base.profile}, {Path(base.trace).name if base.trace else base.workload}, "
    title += base.arrival
    if not meta["complete"]:
        title += f" (interrupted: {finished} of {total} points)"
    plot = plot_sweep(rows, out / "bench.png", title=title) if rows else "none (no point finished)"
    print(
        f"table: {out / 'results.csv'}\nresults: {out / 'results.json'} "
        f"(per seed: {out / 'points.json'})\nplot: {plot}\nwall time: {wall:.1f} s"
    )
