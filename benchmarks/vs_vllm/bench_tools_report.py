"""Rows, the table and the target check of bench_tools.py (no server, no vLLM import)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from session_loop import TurnLog
from tool_workload import Replay, summarize

from augserve.core.metrics import SLOConfig
from augserve.core.request import RequestStatus

PAPER_POLICY = "augserve:augserve"
TARGET = 3.0


def row_for(
    rate: float, name: str, result: Replay, slo: SLOConfig, args: argparse.Namespace,
    load: float, turns: TurnLog | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One (rate, engine) point: `augserve.core.metrics` over the window of arrivals plus
    drain; goodput is per second of arrivals (requests that met the SLO / duration).
    With an agent loop's `turns`: each turn's TTFT, the prefix reuse and the mean job
    completion time (a session's arrival to its last token)."""
    m = summarize(result.records, slo, args.duration + args.drain).to_dict()
    m["goodput_per_arrival_s"] = m["num_met_slo"] / args.duration
    m["arrival_window_s"] = args.duration
    if turns is not None:
        done = RequestStatus.FINISHED_STOPPED
        jcts = [r.finish_time - r.arrival_time for r in result.records
                if r.status is done and r.finish_time is not None]  # fmt: skip
        m["jct_mean"] = sum(jcts) / len(jcts) if jcts else None
        m.update(turn_metrics(turns))
    errors = sorted(set(result.errors.values()))[:3]
    policies = Counter(c.policy.value for r in result.records for c in r.calls if c.policy)
    m["call_policies"] = dict(policies)  # augserve only: what each call's KV went through
    print(f"rate {rate:g} {name}: goodput {m['goodput_per_arrival_s']:.3f} req/s, attainment "
          f"{m['slo_attainment']:.0%}, finished {m['num_finished']}/{m['num_requests']}, "
          f"load {load:.1f}{'; errors: ' + errors[0] if errors else ''}", flush=True)  # fmt: skip
    return {"rate": rate, "engine": name, "load_avg_1min": load, "metrics": m, "errors": errors}


def turn_metrics(turns: TurnLog) -> dict[str, Any]:
    """Per-turn TTFT (all turns, a session's first, the later ones) and prefix reuse:
    the share of the prompt tokens sent that the server's cache held (None where the
    server reported no `cached_tokens`)."""
    first = [t for t, f in zip(turns.ttfts, turns.first_turn, strict=True) if f]
    later = [t for t, f in zip(turns.ttfts, turns.first_turn, strict=True) if not f]
    out: dict[str, Any] = {
        "turns": len(turns.ttfts),
        "turn_ttft_p50": _quantile(turns.ttfts, 0.5),
        "turn_ttft_p99": _quantile(turns.ttfts, 0.99),
        "first_turn_ttft_p50": _quantile(first, 0.5),
        "later_turn_ttft_p50": _quantile(later, 0.5),
        "later_turn_ttft_p99": _quantile(later, 0.99),
    }
    for name, pick in (("prefix_reuse", None), ("first_turn_prefix_reuse", True)):
        pairs = [(p, c) for p, c, f in zip(turns.prompt_tokens, turns.cached_tokens,
                                            turns.first_turn, strict=True)
                 if c is not None and (pick is None or f is pick)]  # fmt: skip
        sent = sum(p for p, _ in pairs)
        out[name] = sum(c for _, c in pairs) / sent if sent else None
    return out


def _quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def table(rows: list[dict[str, Any]]) -> str:
    agents = any("jct_mean" in r["metrics"] for r in rows)
    head = ("| rate (req/s) | engine:policy | goodput (req/s) | SLO att. | TTFT mean / p99 (s) | "
            "norm. lat. mean / p99 (s/tok) | throughput (tok/s) | finished | load |")  # fmt: skip
    if agents:  # an agent loop: a session is a request; its turns' TTFT and its JCT
        head += " turn TTFT p50 / p99 (s) | prefix reuse | JCT mean (s) |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in sorted(rows, key=lambda r: (r["rate"], r["engine"] != "vllm", r["engine"])):
        m = r["metrics"]
        line = (
            f"| {r['rate']:g} | {r['engine']} | {m['goodput_per_arrival_s']:.3f} | "
            f"{m['slo_attainment']:.0%} | {fmt(m['ttft_mean'])} / {fmt(m['ttft_p99'])} | "
            f"{fmt(m['norm_latency_mean'], 3)} / {fmt(m['norm_latency_p99'], 3)} | "
            f"{m['throughput_tps']:.1f} | {m['num_finished']}/{m['num_requests']} | "
            f"{r['load_avg_1min']:.1f} |"
        )
        if agents:
            line += (f" {fmt(m.get('turn_ttft_p50'))} / {fmt(m.get('turn_ttft_p99'))} |"
                     f" {fmt(m.get('prefix_reuse'))} | {fmt(m.get('jct_mean'), 1)} |")  # fmt: skip
        lines.append(line)
    return "\n".join(lines)


def target(rows: list[dict[str, Any]]) -> str:
    """The check: the paper policy's goodput / vLLM's at the lowest rate where vLLM's
    SLO attainment is below 50%."""
    by = {(r["rate"], r["engine"]): r["metrics"] for r in rows}
    rates = sorted({r["rate"] for r in rows})
    low = [x for x in rates if (x, "vllm") in by and by[(x, "vllm")]["slo_attainment"] < 0.5]
    if not low:
        return "target not testable: vLLM met the SLO for >= 50% of requests at every rate"
    rate = low[0]
    name = _paper_engine(by, rate)
    if name is None:
        return f"target not testable: no {PAPER_POLICY} row at rate {rate:g}"
    ours = by[(rate, name)]
    v, a = by[(rate, "vllm")]["goodput_per_arrival_s"], ours["goodput_per_arrival_s"]
    ratio = a / v if v > 0 else float("inf")
    verdict = "MET" if ratio >= TARGET else "MISSED"
    return (f"target ({PAPER_POLICY} >= {TARGET:g}x vLLM's goodput where vLLM's attainment "
            f"< 50%): at {rate:g} req/s vLLM {v:.3f} req/s "
            f"({by[(rate, 'vllm')]['slo_attainment']:.0%}), {name} {a:.3f} req/s "
            f"({ours['slo_attainment']:.0%}): {ratio:.2f}x, {verdict}; "
            f"the most any engine could reach there: {ceiling(ours, v)}")  # fmt: skip


def _paper_engine(by: dict[tuple[float, str], Any], rate: float) -> str | None:
    """The paper policy's row at `rate`: `augserve:augserve` (oracle plans), else the one
    with a predictor suffix (`augserve:augserve+online`)."""
    names = sorted(e for r, e in by if r == rate and e.split("+")[0] == PAPER_POLICY)
    return names[0] if names else None


def ceiling(m: dict[str, Any], vllm_goodput: float) -> str:
    """The largest goodput ratio possible at a point: every request that arrived meets the
    SLO (goodput = requests / seconds of arrivals), over vLLM's goodput. Where vLLM's
    attainment a just drops below 50% this is about 1 / a, i.e. 2x, whatever the policy."""
    window = m.get("arrival_window_s")
    if window is None and m["num_met_slo"]:  # results written before the field existed
        window = m["num_met_slo"] / m["goodput_per_arrival_s"]
    if not window or vllm_goodput <= 0:
        return "-"
    best = m["num_requests"] / window
    return f"{best / vllm_goodput:.2f}x ({best:.3f} req/s)"


def capacities(rows: list[dict[str, Any]], floor: float = 0.9) -> str:
    """Each engine's SLO capacity: the highest rate with at least `floor` attainment, and
    (in brackets, where it differs) the highest rate up to which every rate of the
    sweep has it: on short noisy windows attainment need not fall monotonically."""
    by: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        by.setdefault(r["engine"], []).append((r["rate"], r["metrics"]["slo_attainment"]))
    best: dict[str, float] = {}
    sustained: dict[str, float] = {}
    for engine, points in by.items():
        met = [rate for rate, att in points if att >= floor]
        if met:
            best[engine] = max(met)
        for rate, att in sorted(points):
            if att < floor:
                break
            sustained[engine] = rate
    v = best.get("vllm")
    parts = []
    for e in sorted(by, key=lambda e: (e != "vllm", e)):
        cap = best.get(e)
        if not cap:
            parts.append(f"{e} below every rate")
            continue
        notes = [f"{cap / v:.2f}x vLLM"] if v and e != "vllm" else []
        held = sustained.get(e)
        if held != cap:
            notes.append(f"every rate up to {held:g}" if held else "not at the lowest rate")
        parts.append(f"{e} {cap:g} req/s" + (f" ({'; '.join(notes)})" if notes else ""))
    return f"SLO capacity (highest rate with >= {floor:.0%} attainment): " + "; ".join(parts)


def report(result: dict[str, Any]) -> str:
    v, a = result["vllm"], result["augserve"]
    speed = (
        f"batch-1 decode: vLLM {v['iteration_s'] * 1e3:.1f} ms, augserve "
        f"{a['iteration_s'] * 1e3:.1f} ms; 256-token prefill: vLLM "
        f"{v['prefill_256_s'] * 1e3:.0f} ms, augserve {a['prefill_256_s'] * 1e3:.0f} ms"
    )
    rows = result["rows"]
    return "\n".join([table(rows), "", result["slo_text"], speed, target(rows), capacities(rows)])


if __name__ == "__main__":  # re-print a results file: bench_tools_report.py results.json
    print(report(json.loads(Path(sys.argv[1]).read_text())))
