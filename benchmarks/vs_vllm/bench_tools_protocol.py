"""bench_tools.py under the comparison protocol (docs/benchmarking.md): the committed
config's settings as the run's arguments, the result file, its summary table.

No server, no vLLM import: the tests write a small synthetic result through
`build_result`, the same code path a run takes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from augserve.bench import capacity as stats
from augserve.bench import protocol
from augserve.bench.report import git_commit
from augserve.core.metrics import SLOConfig

# the engine settings a config may fix, with their defaults; `policies` are augserve's
# (augserve's own `vllm` policy is not real vLLM, which always runs)
SETTINGS: dict[str, Any] = {
    "policies": ["augserve"], "predictors": ["online"], "block_size": 32,
    "max_batch_tokens": 2048, "max_num_seqs": 128, "threads": 1, "ttft_iterations": 40.0,
    "profile": "fitted", "server_slo": "bench", "preset": "small",
    "vllm_omp_threads_bind": "0",  # vLLM's OpenMP threads: one, as augserve's --threads 1
    # augserve's side: its own engine; `vllm`, our server over vLLM's AsyncLLM with our
    # scheduler inside (`augserve serve --engine vllm`, rows `augserve-vllm:...`); or
    # `vllm-plugin`, vLLM's server with our scheduler class (rows `vllm-plugin:...`)
    "augserve_engine": "augserve",
    # who times each request: `client` (the replaying client, from the scheduled
    # arrival) or `server` (each server's own marks, augserve.bench.request_marks,
    # read the same way on both sides: server_read.py); the row's `metrics` are the
    # chosen reading, `metrics_client` keeps the client's beside a server reading
    "measure": "client",
}  # fmt: skip
MEASURES = ("client", "server")
BASELINE = "vllm"
ENGINES = ("augserve", "vllm", "vllm-plugin")  # bench_servers.py builds each


def apply_config(args: argparse.Namespace, cfg: protocol.ComparisonConfig) -> None:
    """Everything the run measures with, from the config: workload, scales, rates,
    durations, memory, SLO and engine settings (unknown settings are refused)."""
    unknown = sorted(set(cfg.settings) - set(SETTINGS))
    if unknown:
        raise ValueError(f"config settings: unknown key(s) {', '.join(unknown)}")
    for key, default in SETTINGS.items():
        setattr(args, key, cfg.settings.get(key, default))
    if args.augserve_engine not in ENGINES:
        raise ValueError(f"config settings.augserve_engine must be one of "
                         f"{', '.join(ENGINES)}, got {args.augserve_engine!r}")  # fmt: skip
    if args.measure not in MEASURES:
        raise ValueError(f"config settings.measure must be one of {', '.join(MEASURES)}, "
                         f"got {args.measure!r}")  # fmt: skip
    if args.measure == "server" and cfg.workload in ("agent-sessions", "bfcl-multi-turn"):
        raise ValueError("config settings.measure: 'server' is read for the tool workloads "
                         "only (the agent loop's turns are not marked)")  # fmt: skip
    args.workload, args.rates = cfg.workload, list(cfg.rates)
    args.time_scale, args.length_scale = cfg.time_scale, cfg.length_scale
    args.duration, args.drain = cfg.duration_s, cfg.drain_s
    mem = cfg.memory
    args.kv_tokens = mem.augserve_device_tokens  # augserve's device pool
    args.swap_tokens = mem.augserve_host_tokens  # its host pool (0: none)
    args.vllm_kv_tokens = mem.baseline_tokens  # vLLM's whole pool
    for name, tokens in (("augserve_device_tokens", args.kv_tokens),
                         ("baseline_tokens", args.vllm_kv_tokens)):  # fmt: skip
        if tokens % args.block_size:
            raise ValueError(f"memory.{name} must be a multiple of block_size {args.block_size}")


def slo_config(cfg: protocol.ComparisonConfig) -> SLOConfig:
    return SLOConfig(norm_latency_slo=cfg.slo.norm_latency_s, ttft_slo=cfg.slo.ttft_s)


def calibrated(raw: Mapping[str, Any], iterations: Sequence[float], path: str,
               command: str, ttft_iterations: float) -> dict[str, Any]:  # fmt: skip
    """The config `raw` with its SLO fixed from vLLM's batch-1 decode iterations measured
    by a calibration run (the median): TTFT < `ttft_iterations` of them, normalized
    latency < 10."""
    step = sorted(iterations)[len(iterations) // 2]
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    out = dict(raw)
    out["slo"] = {
        "ttft_s": round(ttft_iterations * step, 6), "norm_latency_s": round(10 * step, 6),
        "source": f"{path}: calibration {date}, vLLM batch-1 decode {step * 1e3:.2f} ms "
                  f"(median of {len(iterations)}) x {ttft_iterations:g} (TTFT), x 10 (norm.)",
    }  # fmt: skip
    out["calibration"] = {
        "command": command, "commit": git_commit(), "date": date,
        "load": list(os.getloadavg()), "vllm_iterations_s": list(iterations),
    }  # fmt: skip
    protocol.ComparisonConfig.from_dict(out)
    return out


def cells_from_rows(
    rows: Sequence[Mapping[str, Any]], reading: str = "metrics"
) -> list[dict[str, Any]]:
    """One cell per (rate, engine): its repeats' seeds, attainment, goodput and load,
    in repeat order (rows carry `repeat` and `seed`); `reading="metrics_client"` takes
    the client's reading of a run the servers timed (docs/benchmarking.md, "Who times
    a request")."""
    cells: dict[tuple[float, str], dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r["rate"], r["engine"], r["repeat"])):
        c = cells.setdefault((r["rate"], r["engine"]), {
            "rate": r["rate"], "engine": r["engine"], "seeds": [], "attainment": [],
            "goodput": [], "load": [],
        })  # fmt: skip
        c["seeds"].append(r["seed"])
        c["attainment"].append(r[reading]["slo_attainment"])
        c["goodput"].append(r[reading]["goodput_per_arrival_s"])
        c["load"].append(r["load_avg_1min"])
    return list(cells.values())


def capacities(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each engine's SLO capacity, and each other engine's capacity ratio to vLLM's."""
    engines = sorted({c["engine"] for c in cells})
    caps = {e: stats.engine_capacity(cells, e) for e in engines}
    out: dict[str, Any] = {"capacity": {e: c.to_dict() for e, c in caps.items()}}
    if BASELINE in caps:
        out["capacity_ratio"] = {
            e: stats.capacity_ratio(c, caps[BASELINE]) for e, c in caps.items() if e != BASELINE
        }
    return out


def build_result(cfg: protocol.ComparisonConfig, config_path: str, command: str,
                 rows: Sequence[Mapping[str, Any]], commit: str | None = None,
                 **extra: Any) -> dict[str, Any]:  # fmt: skip
    """The protocol's result file for a run of `cfg`: fields, cells, capacities; `extra`
    (engine timings, servers, the per-repeat rows) beside them. `commit`: the checkout's
    when the run started (default: now). A run the servers timed also gets
    `client_reading`: the cells and capacities of the client's reading of its rows."""
    cells = cells_from_rows(rows)
    loads = [x for c in cells for x in c["load"]]
    if rows and all("metrics_client" in r for r in rows):
        client = [protocol.summarize_cell(c) for c in cells_from_rows(rows, "metrics_client")]
        extra = {"client_reading": {"cells": client, **capacities(client)}, **extra}
    return protocol.result_file(
        command=command, commit=git_commit() if commit is None else commit,
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        load=[min(loads, default=0.0), max(loads, default=0.0)], memory=cfg.memory,
        slo=cfg.slo, repeats=len(cfg.seeds), time_scale=cfg.time_scale, cells=cells,
        config=config_path, workload=cfg.workload, rates=list(cfg.rates),
        duration_s=cfg.duration_s, drain_s=cfg.drain_s, seeds=list(cfg.seeds),
        **capacities(cells), rows=list(rows), **extra,
    )  # fmt: skip


def _iv(d: Mapping[str, Any], digits: int = 2) -> str:
    if d["low"] is None:
        return f"{d['mean']:.{digits}f}"
    return f"{d['mean']:.{digits}f} [{d['low']:.{digits}f}, {d['high']:.{digits}f}]"


def cells_table(result: Mapping[str, Any]) -> str:
    """Mean [95% interval] of attainment and goodput per cell, the load range, and each
    engine's capacity with its interval."""
    head = "| rate | engine | SLO attainment | goodput (req/s) | load (1 min) |"
    lines = [head, "|---|---|---|---|---|"]
    for c in sorted(result["cells"], key=lambda c: (c["rate"], c["engine"] != BASELINE)):
        load = f"{min(c['load']):.1f}-{max(c['load']):.1f}"
        lines.append(f"| {c['rate']:g} | {c['engine']} | {_iv(c['attainment_interval'])} | "
                     f"{_iv(c['goodput_interval'], 3)} | {load} |")  # fmt: skip
    lines.append("")
    for e, cap in result.get("capacity", {}).items():
        note = f" (censored: {cap['censored']})" if cap["censored"] else ""
        lines.append(f"capacity {e}: {cap['rate']:.2f}/s; per repeat "
                     f"{', '.join(f'{x:.2f}' for x in cap['per_repeat'])}; "
                     f"interval {_iv(cap['interval'])}{note}")  # fmt: skip
    for e, r in result.get("capacity_ratio", {}).items():
        lines.append(f"capacity ratio {e} / {BASELINE}: {r['ratio']:.2f}x; per repeat "
                     f"{', '.join(f'{x:.2f}' for x in r['per_repeat'])}; "
                     f"interval {_iv(r['interval'])}")  # fmt: skip
        lb = r.get("lower_bound")
        if lb and lb["low"] is not None:
            lines.append(f"  censored: per-repeat ratios are lower bounds, mean {lb['mean']:.2f}x, "
                         f"conservative 95% lower end {lb['low']:.2f}x")  # fmt: skip
    return "\n".join(lines)


def read(path: str | Path) -> dict[str, Any]:
    """A result file, checked against the schema."""
    payload: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    protocol.check_result(payload)
    return payload


def cell_plan(
    rates: Sequence[float], names: list[str], repeats: Sequence[int],
    done: set[tuple[float, str, int]],
) -> list[tuple[int, int, float, list[str]]]:  # fmt: skip
    """(repeat, rate index, rate, engines in the order they run) for every cell not in
    `done`; the engines rotate which goes first from one cell to the next."""
    plan = []
    for rep in repeats:
        for k, rate in enumerate(rates):
            turn = (rep + k) % len(names)
            todo = [n for n in names[turn:] + names[:turn] if (rate, n, rep) not in done]
            if todo:
                plan.append((rep, k, rate, todo))
    return plan


def kept_rows(out: Path) -> list[dict[str, Any]]:
    """The rows a run that died wrote before it died (empty if none)."""
    path = out.with_suffix(".rows.jsonl")
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
