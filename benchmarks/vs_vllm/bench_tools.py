"""augserve against real vLLM on the same tool workload, side by side, one run, under the
comparison protocol (docs/benchmarking.md).

    # once, before any comparison: fix the SLO in the committed config, commit it
    .venv/bin/python benchmarks/vs_vllm/bench_tools.py --calibrate \\
        --config benchmarks/configs/vs-vllm-tools.json --out runs/vs_vllm/calib/x.json
    # the comparison: every rate x every seed of the config on every engine
    .venv/bin/python benchmarks/vs_vllm/bench_tools.py \\
        --config benchmarks/configs/vs-vllm-tools.json --out runs/vs_vllm/tools/results.json

The config fixes everything: workload, time and length scale, rates, arrival window
and drain, seeds (>= 3 repeats), memory, SLO, policies and engine settings. One
random-weight model (`augserve make-model --untied`, built if missing). vLLM's
OpenAI server and one `augserve serve --allow-scripted-tools` per policy are
started on it with the same dtype (fp32), block size, max batch tokens and max
sequences, and equal KV memory: vLLM's pool (`memory.baseline_tokens`) equals
augserve's device pool plus its host swap pool. At each (repeat, rate) the same
seeded workload (`tool_workload.build_workload`: the INFERCEPT trace, Poisson
arrivals, lengths and call times scaled) is replayed on each engine in turn,
rotating which goes first; only one is busy at a time; the load average is
recorded beside each replay.

- vLLM: each call ends the request; the client sleeps the call's duration and
  resubmits the whole context plus the returned tokens (prefix caching on).
- augserve (`settings.augserve_engine`: `augserve`, its own engine; `vllm`, our
  server over vLLM's engine): each request is sent once with its plan (`augserve_segments`); the
  call runs on the server (a scripted sleep) while the policy keeps, swaps or
  drops the request's KV. `predictors: ["online"]` (the default) runs the
  server's default predictor, which learns from the calls and segments it has
  seen and never reads the plan (rows `augserve:POLICY+online`); `oracle` reads
  the plan (each call's true duration): an upper bound, since vLLM knows nothing.
- the plugin (`augserve_engine: vllm-plugin`): vLLM's own server with our scheduler
  class, calls on the client as for plain vLLM; with `online` the client sends no
  plan, only the OpenAI fields and `session_id` (rows `vllm-plugin:POLICY+online`).
  The servers themselves: `bench_servers.py`.

The SLO is absolute and read from the config (a calibration run timed vLLM's
batch-1 decode: TTFT < `ttft_iterations` iterations, normalized latency < 10);
it is never re-derived during a comparison. augserve's scheduler is priced with
its own engine's times, measured on a probe server before the policy servers
start. The result file (`augserve.bench.protocol`) holds per cell the per-repeat
attainment, goodput and load, their means with 95% t intervals, and each
engine's SLO capacity with its interval. Servers run in their own process
groups, are stopped by id (also on Ctrl-C / SIGTERM) and their ports freed;
every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
AGENT_WORKLOADS = ("agent-sessions", "bfcl-multi-turn")  # run through the agent loop
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from bench_parts import parse_repeats, part_file  # noqa: E402
from bench_plugin import CPU_ENV  # noqa: E402
from bench_servers import (  # noqa: E402
    ROW_PREFIX,
    augserve_server,
    augserve_vllm_server,
    calls_on_client,
    client_extras,
    ensure_model,
    measure,
    plugin_server,
    vllm_server,
)
from bench_tools_protocol import (  # noqa: E402
    apply_config,
    build_result,
    calibrated,
    cell_plan,
    cells_table,
    kept_rows,
    slo_config,  # noqa: E402
)
from bench_tools_report import row_for, table  # noqa: E402
from common import cpu_flags  # noqa: E402
from managed_server import ManagedServer  # noqa: E402
from server_read import server_read, take_marks  # noqa: E402
from session_loop import TurnLog, replay_agents  # noqa: E402
from tool_workload import (  # noqa: E402
    Replay,
    Scale,
    build_workload,
    decode_iteration_time,
    replay,
    replay_scripted,
)
from tools_profile import fitted_profile, swap_bandwidth, write_profile  # noqa: E402

from augserve.bench.protocol import ComparisonConfig  # noqa: E402
from augserve.bench.report import git_commit  # noqa: E402
from augserve.sched.policies import POLICIES as REGISTRY  # noqa: E402

POLICIES = tuple(REGISTRY)  # every policy augserve serve takes


def run_point(
    name: str, srv: ManagedServer, workload: list[Any], deadline: float, agents: bool = False
) -> tuple[Replay, TurnLog | None]:
    """One replay; with `agents`, the `openai` agent loop (calls on the client for
    every engine, augserve's KV kept as client sessions) and every turn's TTFT and
    prefix reuse. Rows whose server ends a request at each call (vLLM, the plugin)
    are replayed with the calls on the client; the others send each request once."""
    extras = client_extras(name, agents)
    if agents:
        return asyncio.run(replay_agents(srv.base_url, "m", workload, deadline, extras))
    if calls_on_client(name):
        return asyncio.run(replay(srv.base_url, "m", workload, deadline, extras)), None
    return asyncio.run(replay_scripted(srv.base_url, "m", workload, deadline)), None


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--config", required=True,
        help="the committed comparison config (benchmarks/configs/*.json): workload, time "
        "scale, rates, durations, seeds, memory, SLO and engine settings (docs/benchmarking.md)",
    )  # fmt: skip
    p.add_argument(
        "--calibrate", action="store_true",
        help="the calibration run (not part of any comparison): time vLLM's batch-1 decode "
        "and write the SLO into --config; commit it before the comparison runs",
    )  # fmt: skip
    p.add_argument("--model", default=None, help="model dir (default: built under the output)")
    p.add_argument(
        "--swap-bandwidth", type=float, default=None,
        help="bytes/s in augserve's profile (default: measured on this machine, request-sized)",
    )  # fmt: skip
    p.add_argument("--out", default="runs/vs_vllm/tools/results.json")
    p.add_argument(
        "--repeats", default=None,
        help="run only these repeats (e.g. '0' or '1,2'): a part of a run split across "
        "sessions, written as a part file for bench_parts.py (default: every repeat)",
    )  # fmt: skip
    p.add_argument(
        "--resume", action="store_true",
        help="go on with a run that died: keep the cells already in OUT's .rows.jsonl, run "
        "only the others, and price augserve with the profile the first process fitted",
    )  # fmt: skip
    args = p.parse_args()
    raw = json.loads(Path(args.config).read_text())
    args.raw_config = raw
    if args.calibrate:  # the SLO is what the calibration writes: any placeholder is fine
        raw = {**raw, "slo": {"ttft_s": 1.0, "norm_latency_s": 1.0, "source": "uncalibrated"}}
    try:
        args.cfg = ComparisonConfig.from_dict(raw)
        apply_config(args, args.cfg)
    except (ValueError, TypeError) as exc:
        p.error(f"--config {args.config}: {exc}")
    n = len(args.cfg.seeds)
    try:
        args.repeat_indices = (
            tuple(range(n))
            if args.repeats is None
            else parse_repeats(args.repeats, n, args.cfg.split)
        )
    except ValueError as exc:
        p.error(str(exc))
    for pol in args.policies:
        if pol not in POLICIES:
            p.error(f"--config: unknown policy {pol!r} (one of {', '.join(POLICIES)})")
    return args


def main() -> None:
    args = parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    args.model = str(
        ensure_model(Path(args.model or out.parent / f"llama-{args.preset}"), args.preset)
    )
    signal.signal(signal.SIGTERM, _interrupt)
    servers: list[ManagedServer] = []
    try:
        if args.calibrate:
            calibrate(args, out, servers)
            return
        result = bench(args, out, servers)
    finally:
        for srv in servers:
            srv.stop()
    print(result["table"])
    print(f"\nSLO: {args.cfg.slo.source}; written to {out}")


def calibrate(args: argparse.Namespace, out: Path, servers: list[ManagedServer]) -> None:
    """vLLM's batch-1 decode iteration, timed three times on its own server; the SLO
    built from it written into the config (not a comparison: nothing else runs)."""
    vllm = start(vllm_server(args, out.with_name("server-vllm-calibration.log")), servers)
    steps = [asyncio.run(decode_iteration_time(vllm.base_url, "m")) for _ in range(3)]
    command = " ".join([sys.executable, *sys.argv])
    cfg = calibrated(args.raw_config, steps, args.config, command, args.ttft_iterations)
    Path(args.config).write_text(json.dumps(cfg, indent=2) + "\n")
    print(f"calibrated: {cfg['slo']['source']}; written to {args.config}", flush=True)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def start(srv: ManagedServer, servers: list[ManagedServer]) -> ManagedServer:
    servers.append(srv)
    srv.start(start_timeout=600.0)
    return srv


def _augserve_servers(
    args: argparse.Namespace, out: Path, slo: Any, servers: list[ManagedServer],
    named: dict[str, ManagedServer],
) -> tuple[float, float]:  # fmt: skip
    """The probe (augserve's own step times), the fitted profile, then one server per
    policy and predictor into `named`; returns the probe's (decode, prefill) times."""
    probe = start(augserve_server(args, "vllm", out.with_name("server-probe.log"), None), servers)
    a_iter, a_prefill = measure(probe)
    probe.stop()
    print(f"augserve: decode {a_iter * 1e3:.1f} ms, 256-token prefill {a_prefill * 1e3:.0f} ms",
          flush=True)  # fmt: skip
    if args.swap_bandwidth is None:
        args.swap_bandwidth = swap_bandwidth(args)
    print(f"augserve: swaps at {args.swap_bandwidth / 1e9:.2f} GB/s", flush=True)
    prof_path = out.with_name("profile-augserve.json")
    if args.resume and prof_path.is_file():  # the same prices as the cells already run
        prof = prof_path
        print(f"augserve: profile kept from the first process: {prof_path}", flush=True)
    elif args.profile == "fitted":
        prof = fitted_profile(args, prof_path)
        print(f"augserve: profile fitted on the engine: {prof_path}", flush=True)
    else:
        prof = write_profile(args, a_iter, a_prefill, prof_path)
    told = slo if args.server_slo == "bench" else None
    for pol in args.policies:
        for pred in args.predictors:
            tag = pol if pred == "oracle" else f"{pol}+{pred}"
            log = out.with_name(f"server-augserve-{tag}.log")
            srv = augserve_server(args, pol, log, prof, told, predictor=pred)
            named[f"augserve:{tag}"] = start(srv, servers)
    return a_iter, a_prefill


def _vllm_side_servers(
    args: argparse.Namespace, out: Path, slo: Any, servers: list[ManagedServer],
    named: dict[str, ManagedServer], times: tuple[float, float],
) -> None:  # fmt: skip
    """Our scheduler on vLLM's engine, one server per policy and predictor into `named`:
    `augserve serve --engine vllm` (rows `augserve-vllm:...`) or vLLM's server with our
    scheduler class (rows `vllm-plugin:...`), priced with vLLM's measured decode and
    prefill times."""
    if args.swap_bandwidth is None:
        args.swap_bandwidth = 1e9  # unused: no host pool, vLLM swaps nothing per request
    prof = write_profile(args, times[0], times[1], out.with_name("profile-vllm.json"))
    told = slo if args.server_slo == "bench" else None
    build = plugin_server if args.augserve_engine == "vllm-plugin" else augserve_vllm_server
    prefix = ROW_PREFIX[args.augserve_engine]
    for pol in args.policies:
        for pred in args.predictors:
            tag = f"{pol}+{pred}"
            srv = build(args, pol, out.with_name(f"server-{prefix}-{tag}.log"), prof, told, pred)
            named[f"{prefix}:{tag}"] = start(srv, servers)


def bench(args: argparse.Namespace, out: Path, servers: list[ManagedServer]) -> dict[str, Any]:
    """Every repeat (a seed of the config) of every rate on every engine, in one run;
    the engines alternate which goes first; the result file of the protocol."""
    t_start, commit = time.monotonic(), git_commit()  # the code that runs, not a later HEAD
    cfg, slo = args.cfg, slo_config(args.cfg)
    vllm = start(vllm_server(args, out.with_name("server-vllm.log")), servers)
    v_iter, v_prefill = measure(vllm)
    print(f"vLLM: decode {v_iter * 1e3:.1f} ms, 256-token prefill {v_prefill * 1e3:.0f} ms; "
          f"SLO from the config: {cfg.slo.source}", flush=True)  # fmt: skip
    named: dict[str, ManagedServer] = {"vllm": vllm}
    if args.augserve_engine != "augserve":  # vLLM's engine: priced with vLLM's own times
        a_iter, a_prefill = v_iter, v_prefill
        _vllm_side_servers(args, out, slo, servers, named, (v_iter, v_prefill))
    else:
        a_iter, a_prefill = _augserve_servers(args, out, slo, servers, named)
    vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
    scale = Scale(length=args.length_scale, time=args.time_scale)
    rows = kept_rows(out) if args.resume else []
    done = {(r["rate"], r["engine"], r["repeat"]) for r in rows}
    for rep, k, rate, todo in cell_plan(cfg.rates, list(named), args.repeat_indices, done):
        seed = cfg.workload_seed(rep, k)
        workload = build_workload(rate, args.duration, seed, scale, vocab, args.workload)
        for name in todo:
            rows.append(_cell_run(args, name, named[name], workload, slo, rate, rep, seed))
            with out.with_suffix(".rows.jsonl").open("a") as fh:  # kept if the run dies
                fh.write(json.dumps(rows[-1]) + "\n")
    meta = dict(
        wall_s=round(time.monotonic() - t_start, 1), cpu=cpu_flags(),
        vllm={"iteration_s": v_iter, "prefill_256_s": v_prefill},
        augserve={"iteration_s": a_iter, "prefill_256_s": a_prefill},
        servers={name: " ".join(srv.argv[1:]) for name, srv in named.items()},
        cpu_env={**{k: os.environ.get(k, v) for k, v in CPU_ENV.items()},
                 "VLLM_CPU_OMP_THREADS_BIND": args.vllm_omp_threads_bind},
        swap_bandwidth=args.swap_bandwidth,
    )  # fmt: skip
    if args.resume:
        meta["resumed"] = {"rows_kept": len(done), "profile": "kept from the first process"}
    command = " ".join([sys.executable, *sys.argv])
    if args.repeats is not None:  # a part: rows only, merged later (bench_parts.py)
        result = part_file(args.config, args.repeat_indices, rows, commit=commit,
                           date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                           command=command, **meta)  # fmt: skip
        result["table"] = table(rows)
        out.write_text(json.dumps(result, indent=2))
        return result
    result = build_result(cfg, args.config, command, rows, commit, **meta)
    result["table"] = table(rows) + "\n\n" + cells_table(result)
    out.write_text(json.dumps(result, indent=2))
    return result


def _cell_run(
    args: argparse.Namespace, name: str, srv: ManagedServer, workload: list[Any], slo: Any,
    rate: float, rep: int, seed: int,
) -> dict[str, Any]:  # fmt: skip
    """One replay of one cell's workload on one engine: its row, with the load beside."""
    load = os.getloadavg()[0]
    agents = args.workload in AGENT_WORKLOADS
    if args.measure == "server":
        take_marks(srv.base_url)  # none kept from before this replay
    result, turns = run_point(name, srv, workload, args.duration + args.drain, agents)
    if args.measure == "server":
        client = row_for(rate, f"{name} (client-read)", result, slo, args, load, turns)
        read = server_read(result, take_marks(srv.base_url))
        row = row_for(rate, name, read.replay, slo, args, load, turns)
        row |= {"metrics_client": client["metrics"], "marks_missing": read.missing}
    else:
        row = row_for(rate, name, result, slo, args, load, turns)
    time.sleep(3.0)
    return {**row, "repeat": rep, "seed": seed}


if __name__ == "__main__":
    main()
