"""The agent-session comparison in the simulator, with the tools on the client: the
sessions-q1 config's workload, memory, SLO and grid, the policies on the real
scheduler (docs/results-vs-vllm.md, "sessions-q1 in the simulator").

    python benchmarks/sim_sessions.py [--config C] [--profile P] [--out DIR]

Each session is played as an OpenAI agent loop drives a server (`sim/client_sessions.py`):
a turn ends with "tool_calls", the client's tool returns after its time and the next
turn resends the whole context. `vllm` is vLLM's behaviour (FCFS, prefix cache, no
session kept, as real vLLM serves it); the others run as `augserve serve` does by
default (sessions kept for 600 s, prefix cache on; "(no gate)": `augserve-slo` with its
admission gate off, `admit_growth=0`, `sched/admission.py`). The SLO is judged per session as
`bench_tools.py` judges it: the first turn's TTFT and the session's time in the server
per generated token. Writes DIR/result.json, DIR/table.md and DIR/attainment.png.
`--engine-time X` prices every iteration X times the profile's time (the served engine
ran 1.6x its profile on these batches: docs/results-vs-vllm.md); the scheduler is told
so, unless `--scheduler-time Y` says what it believes instead (Y = 1: it plans with the
profile while the engine runs X times slower, as the served scheduler did).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE / "vs_vllm"))

from tool_workload import Scale, build_workload  # noqa: E402

from augserve.bench.capacity import mean_interval  # noqa: E402
from augserve.bench.protocol import load_config  # noqa: E402
from augserve.bench.protocol_plot import plot_protocol  # noqa: E402
from augserve.core.config import scheduler_config_for  # noqa: E402
from augserve.core.request import Request  # noqa: E402
from augserve.predict.online import OnlinePredictor  # noqa: E402
from augserve.profiles import load_profile  # noqa: E402
from augserve.sim.simulator import SimResult, Simulator  # noqa: E402

CONFIG = ROOT / "benchmarks/configs/vs-vllm-agent-sessions-q1.json"
PROFILE = ROOT / "docs/data/sessions-q1-diag/profile-augserve.json"
VOCAB = 49152  # runs/calib/llama-small's
# name -> (policy, session_ttl, extra SchedulerConfig fields)
ENGINES: dict[str, tuple[str, float, dict[str, Any]]] = {
    "vllm": ("vllm", 0.0, {}),
    "augserve": ("augserve", 600.0, {}),
    "augserve (rule 3)": ("augserve", 600.0, {"newest_first": True}),
    "augserve-slo": ("augserve-slo", 600.0, {}),
    "augserve-slo (no gate)": ("augserve-slo", 600.0, {"admit_growth": 0.0}),
}


def requests(rate: float, duration: float, seed: int, scale: Scale) -> list[Request]:
    """The bench's workload (the same seeds give the same sessions) as requests."""
    work = build_workload(rate, duration, seed, scale, VOCAB, "agent-sessions")
    return [
        Request(w.request_id, w.arrival, len(w.prompt_ids), list(w.segments), kind=w.kind,
                token_ids=list(w.prompt_ids), session_id=w.request_id)
        for w in work
    ]  # fmt: skip


def session_metrics(res: SimResult, ttft_slo: float, norm_slo: float) -> dict[str, Any]:
    """Per session, as `bench_tools.py` records it: TTFT of the first turn; time in the
    server (each turn from its arrival to its last token) per generated token."""
    sessions: dict[str, list[Request]] = {}
    for r in res.requests:
        sessions.setdefault(r.request_id.split("/", 1)[0], []).append(r)
    met, later = 0, []
    end = res.window + res.drain
    for turns in sessions.values():
        turns.sort(key=lambda r: r.arrival_time)
        last = turns[-1]
        if last.finish_time is None or last.finish_time > end or last.segments[-1].has_call:
            continue  # unfinished in the window (or its last turn never came)
        ttft = (turns[0].first_token_time or end) - turns[0].arrival_time
        busy = sum(_turn_end(t, t is last) - t.arrival_time for t in turns)
        gen = sum(t.num_generated_tokens for t in turns)
        met += ttft < ttft_slo and busy / max(1, gen) < norm_slo
        later += [t.first_token_time - t.arrival_time for t in turns[1:] if t.first_token_time]
    later.sort()
    return {
        "num_requests": len(sessions), "num_met_slo": met,
        "slo_attainment": met / len(sessions) if sessions else 0.0,
        "turns": len(res.requests),
        "later_turn_ttft_p99": later[int(0.99 * (len(later) - 1))] if later else None,
    }  # fmt: skip


def _turn_end(turn: Request, last: bool) -> float:
    """When a turn's last token came: its pause for the client's call, or its finish."""
    if not last and turn.calls:
        return turn.calls[-1].start
    assert turn.finish_time is not None
    return turn.finish_time


def run_cell(engine: str, rate: float, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    cfg = args.cfg
    policy, ttl, extra = ENGINES[engine]
    base = load_profile(args.profile)
    prof = base.scaled(getattr(args, "engine_time", 1.0))
    believed = getattr(args, "scheduler_time", None)
    told = prof if believed is None else base.scaled(believed)
    bs = int(cfg.settings["block_size"])
    sched_cfg = scheduler_config_for(
        told, policy, bs, num_device_blocks=cfg.memory.augserve_device_tokens // bs,
        num_host_blocks=0, max_batch_tokens=int(cfg.settings["max_batch_tokens"]),
        max_num_seqs=int(cfg.settings["max_num_seqs"]), session_ttl=ttl,
        enable_prefix_caching=True, slo_ttft=cfg.slo.ttft_s,
        slo_norm_latency=cfg.slo.norm_latency_s, **extra,
    )  # fmt: skip
    sim = Simulator(
        prof, sched_cfg, OnlinePredictor(), client_sessions=True, scheduler_profile=told
    )
    scale = Scale(length=cfg.length_scale, time=cfg.time_scale)
    reqs = requests(rate, cfg.duration_s, seed, scale)
    res = sim.run(reqs, cfg.duration_s, cfg.drain_s)
    m = session_metrics(res, cfg.slo.ttft_s, cfg.slo.norm_latency_s)
    assert sim.sched is not None
    st = sim.sched.stats()
    m.update(goodput_per_arrival_s=m["num_met_slo"] / cfg.duration_s,
             preemptions=st.preemptions.get("recompute", 0),
             recomputed_tokens=st.recomputed_tokens)  # fmt: skip
    return {"rate": rate, "engine": engine, "seed": seed, "metrics": m}


def cells(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out: dict[tuple[float, str], dict[str, Any]] = {}
    for r in rows:
        c = out.setdefault(
            (r["rate"], r["engine"]),
            {
                "rate": r["rate"],
                "engine": r["engine"],
                "seeds": [],
                "attainment": [],
                "goodput": [],
                "preemptions": [],
            },
        )
        c["seeds"].append(r["seed"])
        c["attainment"].append(r["metrics"]["slo_attainment"])
        c["goodput"].append(r["metrics"]["goodput_per_arrival_s"])
        c["preemptions"].append(r["metrics"]["preemptions"])
    for c in out.values():
        for key in ("attainment", "goodput"):
            c[f"{key}_interval"] = mean_interval([float(v) for v in c[key]]).to_dict()
    return list(out.values())


def table(result: dict[str, Any]) -> str:
    lines = [
        "| sessions/s | engine | SLO att. (mean [95%]) | repeats | preemptions (mean) |",
        "|---|---|---|---|---|",
    ]
    for c in result["cells"]:
        iv = c["attainment_interval"]
        # a t-interval of 3 shares can pass 0 or 1: shown clipped (the JSON keeps it)
        lo = "-" if iv["low"] is None else f"{max(0.0, iv['low']):.0%}"
        hi = "-" if iv["high"] is None else f"{min(1.0, iv['high']):.0%}"
        reps = " / ".join(f"{v:.0%}" for v in c["attainment"])
        pre = sum(c["preemptions"]) / len(c["preemptions"])
        lines.append(f"| {c['rate']:g} | {c['engine']} | {iv['mean']:.0%} [{lo}, {hi}] | "
                     f"{reps} | {pre:.0f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(CONFIG))
    ap.add_argument("--profile", default=str(PROFILE))
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    ap.add_argument("--out", default=str(ROOT / "docs/data/sim-sessions-q1"))
    ap.add_argument(
        "--engine-time",
        type=float,
        default=1.0,
        metavar="X",
        help="every coefficient of the profile times X (the engine X times slower)",
    )
    ap.add_argument(
        "--scheduler-time",
        type=float,
        default=None,
        metavar="Y",
        help="the scheduler's profile times Y (default: X, it knows the engine's speed)",
    )
    args = ap.parse_args()
    args.cfg = load_config(args.config)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0, rows = time.monotonic(), []
    for rep in range(len(args.cfg.seeds)):
        for k, rate in enumerate(args.cfg.rates):
            seed = args.cfg.workload_seed(rep, k)
            for engine in args.engines:
                rows.append(run_cell(engine, rate, seed, args))
                att = rows[-1]["metrics"]["slo_attainment"]
                print(f"repeat {rep} rate {rate:g} {engine}: attainment {att:.0%}", flush=True)
    result = {
        "command": " ".join([sys.executable, *sys.argv]), "config": args.config,
        "profile": args.profile, "engine_time": args.engine_time,
        "scheduler_time": args.scheduler_time, "predictor": "online",
        "executor": "simulator",
        "wall_s": round(time.monotonic() - t0, 1), "load": os.getloadavg()[0],
        "rows": rows, "cells": sorted(cells(rows), key=lambda c: (c["rate"], c["engine"])),
    }  # fmt: skip
    result["table"] = table(result)
    (out / "result.json").write_text(json.dumps(result, indent=2))
    (out / "table.md").write_text(result["table"] + "\n")
    title = "agent sessions (sessions-q1) in the simulator"
    if args.engine_time != 1.0:
        title += f", engine {args.engine_time:g}x slower than its profile"
    if args.scheduler_time is not None:
        title += f", scheduler told {args.scheduler_time:g}x"
    plot_protocol(result, out / "attainment.png", title)
    print(result["table"])


if __name__ == "__main__":
    main()
