"""augserve against real vLLM on the same tool workload, side by side, one run.

    flock /tmp/augserve-cpu.lock .venv/bin/python benchmarks/vs_vllm/bench_tools.py \\
        --preset small --rates 1 2 3 4 --policies vllm infercept augserve \\
        --out runs/vs_vllm/tools/results.json

One random-weight model (`augserve make-model --untied`, built if missing). vLLM's
OpenAI server and one `augserve serve --allow-scripted-tools` per policy are
started on it with the same dtype (fp32), KV memory (`--kv-tokens`, in both as
blocks of `--block-size` tokens), max batch tokens and max sequences, and all stay
up; at each rate the same workload (`tool_workload.build_workload`: the INFERCEPT
trace, Poisson arrivals, lengths and call times scaled) is replayed on each in
turn, rotating which goes first; only one is busy at a time.

- vLLM: each call ends the request; the client sleeps the call's duration and
  resubmits the whole context plus the returned tokens (prefix caching on).
- augserve: each request is sent once with its plan (`augserve_segments`); the
  call runs on the server (a scripted sleep) while the policy keeps, swaps or
  drops the request's KV. With `--predictors oracle` (the default, and every run
  before issue 24) the scheduler reads the plan, so it knows each call's true
  duration and each segment's true length: an upper bound, since vLLM knows
  nothing. `--predictors online` runs the server's default predictor instead,
  which learns from the calls and segments it has seen and never reads the
  plan (rows `augserve:POLICY+online`); give both to run them side by side.

One SLO for both, absolute, from vLLM's own batch-1 decode iteration measured
first: TTFT < `--ttft-iterations` iterations, normalized latency < 10 iterations.
augserve's scheduler is priced with its own engine's times, measured the same way
on a probe server before the policy servers start. Servers run in their own process
groups, are stopped by id (also on Ctrl-C / SIGTERM) and their ports freed; every
wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from bench_plugin import CPU_ENV, VLLM_PY, prefill_time  # noqa: E402
from bench_tools_report import report, row_for  # noqa: E402
from common import cpu_flags  # noqa: E402
from session_loop import augserve_turn_extras, plain_turn_extras, replay_agents  # noqa: E402
from tool_workload import (  # noqa: E402
    ManagedServer,
    Replay,
    Scale,
    build_workload,
    decode_iteration_time,
    free_port,
    replay,
    replay_scripted,
    slo_from_iteration,
)
from tools_profile import fitted_profile, kv_bytes, swap_bandwidth, write_profile  # noqa: E402

from augserve.sched.policies import POLICIES as REGISTRY  # noqa: E402

AUGSERVE = ROOT / ".venv" / "bin" / "augserve"
POLICIES = tuple(REGISTRY)  # every policy augserve serve takes


def ensure_model(path: Path, preset: str) -> Path:
    if not (path / "config.json").is_file():
        cmd = [str(AUGSERVE), "make-model", "--arch", "llama", "--preset", preset, "--untied",
               "--out", str(path)]  # fmt: skip
        subprocess.run(cmd, check=True, timeout=600)
    return path


def vllm_server(args: argparse.Namespace, log: Path) -> ManagedServer:
    port = free_port()
    argv = [
        str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", args.model,
        "--served-model-name", "m", "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
        "--enable-prefix-caching", "--seed", "0", "--disable-uvicorn-access-log",
        "--block-size", str(args.block_size),
        "--num-gpu-blocks-override", str(args.kv_tokens // args.block_size),
        "--max-num-batched-tokens", str(args.max_batch_tokens),
        "--max-num-seqs", str(args.max_num_seqs),
    ]  # fmt: skip
    env = {**os.environ, **{k: os.environ.get(k, v) for k, v in CPU_ENV.items()}}
    return ManagedServer(argv, port, env, log)


def augserve_server(
    args: argparse.Namespace,
    policy: str,
    log: Path,
    profile: Path | None,
    slo: Any = None,
    predictor: str = "oracle",
) -> ManagedServer:
    """`augserve serve` on the model; with `slo` (the benchmark's SLOConfig) the
    scheduler is told the SLO it is judged by (`augserve-slo` triages by it)."""
    port = free_port()
    argv = [
        str(AUGSERVE), "serve", "--model", args.model, "--served-model-name", "m",
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--max-model-len", "2048", "--device", "cpu", "--policy", policy,
        "--block-size", str(args.block_size),
        "--num-device-blocks", str(args.kv_tokens // args.block_size),
        "--max-num-batched-tokens", str(args.max_batch_tokens),
        "--max-num-seqs", str(args.max_num_seqs), "--threads", str(args.threads),
        "--allow-scripted-tools", "--log-level", "warning", "--predictor", predictor,
    ]  # fmt: skip
    if args.swap_tokens:
        argv += ["--swap-space", f"{args.swap_tokens * kv_bytes(args.model) / 2**30:.6f}"]
    argv += ["--profile", str(profile) if profile is not None else "default"]
    if slo is not None:
        argv += ["--set", f"slo_ttft={slo.ttft_slo!r}"]
        argv += ["--set", f"slo_norm_latency={slo.norm_latency_slo!r}"]
    return ManagedServer(argv, port, dict(os.environ), log)


def measure(srv: ManagedServer) -> tuple[float, float]:
    """(batch-1 decode iteration, 256-token prefill) in seconds."""
    return asyncio.run(decode_iteration_time(srv.base_url, "m")), asyncio.run(
        prefill_time(srv.base_url, 256)
    )


def run_point(
    name: str, srv: ManagedServer, workload: list[Any], deadline: float, agents: bool = False
) -> tuple[Replay, list[float] | None]:
    """One replay; with `agents`, the `openai` agent loop (calls on the client for
    every engine, augserve's KV kept as client sessions) and every turn's TTFT."""
    if agents:
        extras = plain_turn_extras if name == "vllm" else augserve_turn_extras
        return asyncio.run(replay_agents(srv.base_url, "m", workload, deadline, extras))
    if name == "vllm":
        return asyncio.run(replay(srv.base_url, "m", workload, deadline)), None
    return asyncio.run(replay_scripted(srv.base_url, "m", workload, deadline)), None


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="model dir (default: built under the output)")
    p.add_argument("--preset", default="small", choices=("tiny", "small", "100m"))
    p.add_argument("--rates", type=float, nargs="+", default=[1.0, 2.0, 3.0, 4.0])
    p.add_argument("--policies", nargs="+", default=["vllm", "infercept", "augserve"])
    p.add_argument(
        "--predictors", nargs="+", choices=("oracle", "online"), default=["oracle"],
        help="augserve's predictor: oracle (reads each request's plan: an upper bound) "
        "and/or online (the server's default: learned from its own traffic)",
    )  # fmt: skip
    p.add_argument(
        "--workload", choices=("infercept", "agent-sessions"), default="infercept",
        help="infercept: server-side calls for augserve (scripted plans), client-side for "
        "vLLM; agent-sessions: multi-turn sessions, tools on the client for every engine, "
        "driven by an `openai` agent loop (rates are sessions/s)",
    )  # fmt: skip
    p.add_argument("--duration", type=float, default=30.0, help="seconds of arrivals per point")
    p.add_argument("--drain", type=float, default=45.0, help="seconds allowed after arrivals")
    p.add_argument("--length-scale", type=float, default=0.25)
    p.add_argument("--time-scale", type=float, default=0.1)
    p.add_argument("--ttft-iterations", type=float, default=40.0)
    p.add_argument(
        "--slo-iteration", type=float, default=None, metavar="SECONDS",
        help="the decode iteration the SLO is built from (default: vLLM's, measured first); "
        "give an earlier run's to add points judged by the same SLO",
    )  # fmt: skip
    p.add_argument(
        "--vllm-only", action="store_true",
        help="run real vLLM alone (no augserve server): e.g. more rates for an earlier run",
    )  # fmt: skip
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--kv-tokens", type=int, default=4096, help="KV cache of both, in tokens")
    p.add_argument("--swap-tokens", type=int, default=4096, help="augserve's host KV, tokens")
    p.add_argument(
        "--swap-bandwidth", type=float, default=None,
        help="bytes/s in augserve's profile (default: measured on this machine, request-sized)",
    )  # fmt: skip
    p.add_argument(
        "--profile", choices=("fitted", "flat"), default="fitted",
        help="augserve's latency profile: fitted on the engine over batch shapes "
        "(`augserve profile --quick`), or flat (one decode iteration, whatever the batch)",
    )  # fmt: skip
    p.add_argument(
        "--server-slo", choices=("bench", "paper"), default="bench",
        help="the SLO augserve's scheduler is told: the benchmark's (from vLLM's step) "
        "or none, i.e. the paper's default (TTFT 1 s, 10 iterations of the profile)",
    )  # fmt: skip
    p.add_argument("--max-batch-tokens", type=int, default=2048)
    p.add_argument("--max-num-seqs", type=int, default=128)
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="augserve's torch threads (1: on this loaded 2-core machine 2 threads made each "
        "small-model step ~9x slower, waiting on each other)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/vs_vllm/tools/results.json")
    args = p.parse_args()
    for pol in args.policies:
        if pol not in POLICIES:
            p.error(f"--policies: unknown policy {pol!r} (one of {', '.join(POLICIES)})")
    if args.kv_tokens % args.block_size:
        p.error("--kv-tokens must be a multiple of --block-size")
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
        result = bench(args, out, servers)
    finally:
        for srv in servers:
            srv.stop()
    print(result["table"])
    print(f"\n{result['slo_text']}; written to {out}")


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
    if args.profile == "fitted":
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


def bench(args: argparse.Namespace, out: Path, servers: list[ManagedServer]) -> dict[str, Any]:
    t_start = time.monotonic()
    vllm = start(vllm_server(args, out.with_name("server-vllm.log")), servers)
    v_iter, v_prefill = measure(vllm)
    slo_iter = v_iter if args.slo_iteration is None else args.slo_iteration
    slo = slo_from_iteration(slo_iter, args.ttft_iterations)
    src = "vLLM's batch-1 decode iteration" if args.slo_iteration is None else "--slo-iteration"
    slo_text = (
        f"SLO (from {src} {slo_iter * 1e3:.1f} ms): TTFT < "
        f"{slo.ttft_slo:.2f} s, normalized latency < {slo.norm_latency_slo:.3f} s/token"
    )
    print(f"vLLM: decode {v_iter * 1e3:.1f} ms, 256-token prefill {v_prefill * 1e3:.0f} ms; "
          f"{slo_text}", flush=True)  # fmt: skip
    a_iter = a_prefill = float("nan")
    named: dict[str, ManagedServer] = {"vllm": vllm}
    if not args.vllm_only:
        a_iter, a_prefill = _augserve_servers(args, out, slo, servers, named)
    vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
    scale = Scale(length=args.length_scale, time=args.time_scale)
    rows: list[dict[str, Any]] = []
    names = list(named)
    for k, rate in enumerate(args.rates):
        workload = build_workload(rate, args.duration, args.seed + k, scale, vocab,
                                  args.workload)  # fmt: skip
        order = names[k % len(names) :] + names[: k % len(names)]
        for name in order:
            load = os.getloadavg()[0]
            agents = args.workload == "agent-sessions"
            deadline = args.duration + args.drain
            result, ttfts = run_point(name, named[name], workload, deadline, agents)
            rows.append(row_for(rate, name, result, slo, args, load, ttfts))
            time.sleep(3.0)
    result: dict[str, Any] = {
        "command": " ".join([sys.executable, *sys.argv]),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "wall_s": round(time.monotonic() - t_start, 1),
        "cpu": cpu_flags(),
        "load_avg_at_end": os.getloadavg(),
        "vllm": {"iteration_s": v_iter, "prefill_256_s": v_prefill},
        "augserve": {"iteration_s": a_iter, "prefill_256_s": a_prefill},
        "slo": {"ttft_s": slo.ttft_slo, "norm_latency_s_per_token": slo.norm_latency_slo},
        "slo_text": slo_text,
        "scale": vars(scale),
        "args": {k: v for k, v in vars(args).items()},
        "servers": {name: " ".join(srv.argv[1:]) for name, srv in named.items()},
        "cpu_env": {k: os.environ.get(k, v) for k, v in CPU_ENV.items()},
        "rows": rows,
    }
    result["table"] = report(result)
    out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
