"""vLLM with and without our scheduler class on the tool workload (tool_workload.py), one run.

    .venv/bin/python benchmarks/vs_vllm/bench_plugin.py --model DIR \\
        --rates 1 2 3 --duration 30 --reps 2 --out runs/vllm_plugin/results.json

Starts vLLM's OpenAI server twice on the same model (vLLM's default scheduler;
`--scheduler-cls augserve.integrations.vllm.AugServeScheduler`), both with
prefix caching, fp32, eager, `--max-model-len 2048`, and replays the same
workload at each rate on both, alternating which goes first; only one server is
busy at a time. The SLO is absolute, from vLLM's own batch-1 decode time measured
here first, and so is our scheduler's latency profile (decode and prefill times
of the default server). With `--predictor online` (the default) the client sends
no plan: only the OpenAI fields and `session_id`, as a real client does; with
`oracle` or `noisy:P` each turn carries its plan (`augserve_plan`). Servers are
stopped by process id and their ports freed, also on Ctrl-C; every wait is bounded.
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
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from common import cpu_flags  # noqa: E402
from managed_server import ManagedServer, free_port  # noqa: E402
from tool_workload import (  # noqa: E402
    Replay,
    Scale,
    build_workload,
    complete,
    decode_iteration_time,
    replay,
    slo_from_iteration,
    summarize,
)

from augserve.bench.report import git_commit  # noqa: E402
from augserve.core.metrics import request_metrics  # noqa: E402

VLLM_PY = Path(  # $VLLM_PYTHON, else $VLLM_VENV/bin/python, else setup_env.sh's default venv
    os.environ.get("VLLM_PYTHON")
    or Path(os.environ.get("VLLM_VENV", HERE / ".venv-vllm")) / "bin" / "python"
)
PLUGIN = "augserve.integrations.vllm.AugServeScheduler"
CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "2",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    "HF_HUB_OFFLINE": "1",
}
COLUMNS = ("goodput", "slo_attainment", "ttft_mean", "ttft_p95", "norm_latency_mean",
           "norm_latency_p95", "num_finished", "num_requests")  # fmt: skip


def server(
    model: str, log: Path, plugin_config: dict[str, Any] | None, kv_blocks: int | None
) -> ManagedServer:
    port = free_port()
    argv = [
        str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", model,
        "--served-model-name", "m", "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager",
        "--enable-prefix-caching", "--seed", "0", "--disable-uvicorn-access-log",
    ]  # fmt: skip
    if kv_blocks is not None:
        argv += ["--num-gpu-blocks-override", str(kv_blocks)]
    if plugin_config is not None:
        argv += ["--scheduler-cls", PLUGIN, "--additional-config",
                 json.dumps({"augserve": plugin_config})]  # fmt: skip
    env = {**os.environ, **{k: os.environ.get(k, v) for k, v in CPU_ENV.items()}}
    return ManagedServer(argv, port, env, log)


async def prefill_time(base_url: str, tokens: int) -> float:
    """Seconds from sending a `tokens`-token prompt to its first token (best of 3)."""
    import httpx

    best = float("inf")
    async with httpx.AsyncClient(base_url=base_url, timeout=300.0) as client:
        for i in range(3):
            ctx = [3 + (i * 7 + j) % 3000 for j in range(tokens)]  # a new prompt each time
            t0 = time.monotonic()
            turn = await complete(client, "m", ctx, 1, {})
            best = min(best, (turn.first or time.monotonic()) - t0)
    return best


def vllm_version() -> str:
    import subprocess

    code = "import vllm; print(vllm.__version__)"
    out = subprocess.run([str(VLLM_PY), "-c", code], capture_output=True, text=True, timeout=300)
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "unknown"


def cpu_profile(model: str, iteration: float, prefill: float, n: int, path: Path) -> Path:
    """A latency profile of vLLM on this CPU: c0 = the decode iteration, c_prefill from
    an `n`-token prefill; KV bytes from the model's config (fp32)."""
    cfg = json.loads((Path(model) / "config.json").read_text())
    head = cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    kv_bytes = 2 * cfg["num_hidden_layers"] * kv_heads * head * 4
    profile = {
        "name": "vllm-cpu-measured", "c0": iteration,
        "c_prefill": max(0.0, prefill - iteration) / n, "c_attn": 0.0, "c_decode": 0.0,
        "c_ctx": 0.0, "kv_bytes": kv_bytes, "device_kv_bytes": 2 * 1024**3,
        "host_kv_bytes": 0, "swap_bandwidth": 1e10, "max_batch_tokens": 4096,
        "description": f"vLLM CPU, measured: decode {iteration * 1e3:.1f} ms, "
                       f"{n}-token prefill {prefill * 1e3:.0f} ms",
    }  # fmt: skip
    path.write_text(json.dumps(profile, indent=2))
    return path


def run_point(srv: ManagedServer, workload: list[Any], args: argparse.Namespace) -> Replay:
    deadline = args.duration + args.drain
    if args.predictor == "online":  # nothing but the OpenAI fields and session_id
        return asyncio.run(replay(srv.base_url, "m", workload, deadline, no_plan))
    return asyncio.run(replay(srv.base_url, "m", workload, deadline))


def no_plan(req: Any, k: int) -> dict[str, Any]:
    return {}


def point_row(
    rate: float, rep: int, name: str, result: Replay, slo: Any, args: argparse.Namespace,
    load: float,
) -> dict[str, Any]:  # fmt: skip
    records = result.records
    m = summarize(records, slo, args.duration + args.drain).to_dict()
    errors = sorted(set(result.errors.values()))[:3]
    per_request = [
        {k: getattr(x, k) for k in ("request_id", "arrival_time", "finished", "met_slo", "ttft",
                                    "norm_latency", "generated_tokens", "planned_tokens")}
        for x in (request_metrics(r, slo, args.duration + args.drain) for r in records)
    ]  # fmt: skip
    print(f"rate {rate:g} rep {rep} {name}: goodput {m['goodput']:.3f}, attainment "
          f"{m['slo_attainment']:.0%}, finished {m['num_finished']}/{m['num_requests']}, "
          f"load {load:.1f}{'; errors: ' + errors[0] if errors else ''}", flush=True)  # fmt: skip
    return {"rate": rate, "rep": rep, "scheduler": name, "load_avg_1min": load, "metrics": m,
            "errors": errors, "requests": per_request}  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    """Means over the repetitions of each (rate, scheduler); goodput per repetition too."""
    head = "| rate | scheduler | goodput (req/s): mean [per rep] | SLO att. | " \
           "TTFT mean / p95 (s) | norm. lat. mean / p95 (s/tok) | finished |"  # fmt: skip
    lines = [head, "|---|---|---|---|---|---|---|"]
    keys = sorted({(r["rate"], r["scheduler"]) for r in rows})
    for rate, name in keys:
        ms = [r["metrics"] for r in rows if (r["rate"], r["scheduler"]) == (rate, name)]
        good = [m["goodput"] for m in ms]
        lines.append(
            f"| {rate:g} | {name} | {mean(good):.3f} [{', '.join(f'{g:.3f}' for g in good)}] | "
            f"{mean([m['slo_attainment'] for m in ms]):.0%} | "
            f"{fmt(mean_of(ms, 'ttft_mean'))} / {fmt(mean_of(ms, 'ttft_p95'))} | "
            f"{fmt(mean_of(ms, 'norm_latency_mean'), 3)} / "
            f"{fmt(mean_of(ms, 'norm_latency_p95'), 3)} | "
            f"{sum(m['num_finished'] for m in ms)}/{sum(m['num_requests'] for m in ms)} |"
        )
    return "\n".join(lines)


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def mean_of(ms: list[dict[str, Any]], key: str) -> float | None:
    xs = [m[key] for m in ms if m[key] is not None]
    return mean(xs) if xs else None


def fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--rates", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    p.add_argument("--duration", type=float, default=30.0, help="seconds of arrivals per point")
    p.add_argument("--drain", type=float, default=60.0, help="seconds allowed after arrivals")
    p.add_argument("--length-scale", type=float, default=0.25)
    p.add_argument("--time-scale", type=float, default=0.1)
    p.add_argument("--ttft-iterations", type=float, default=40.0)
    p.add_argument(
        "--predictor", default="online", help="the plugin's; online sends no plan (default)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reps", type=int, default=2, help="sweeps, alternating the order")
    p.add_argument(
        "--kv-blocks",
        type=int,
        default=None,
        help="KV blocks of both servers (--num-gpu-blocks-override; default: vLLM's)",
    )
    p.add_argument("--out", default="runs/vllm_plugin/results.json")
    args = p.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _interrupt)
    servers: list[ManagedServer] = []
    try:
        result = bench(args, out, servers)
    finally:
        for srv in servers:
            srv.stop()
    print(table(result["rows"]))
    print(f"\nSLO: {result['slo']}; written to {out}")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def bench(args: argparse.Namespace, out: Path, servers: list[ManagedServer]) -> dict[str, Any]:
    scale = Scale(length=args.length_scale, time=args.time_scale)
    default = server(args.model, out.with_name("server-vllm.log"), None, args.kv_blocks)
    servers.append(default)
    default.start()
    iteration = asyncio.run(decode_iteration_time(default.base_url, "m"))
    prefill = asyncio.run(prefill_time(default.base_url, 256))
    slo = slo_from_iteration(iteration, args.ttft_iterations)
    prof = cpu_profile(args.model, iteration, prefill, 256, out.with_name("profile.json"))
    print(f"vLLM decode iteration {iteration * 1e3:.1f} ms, 256-token prefill "
          f"{prefill * 1e3:.0f} ms; SLO: TTFT < {slo.ttft_slo:.2f} s, normalized latency "
          f"< {slo.norm_latency_slo:.3f} s/token", flush=True)  # fmt: skip
    plugin_cfg = {"profile": str(prof.resolve()), "predictor": args.predictor}
    ours = server(args.model, out.with_name("server-augserve.log"), plugin_cfg, args.kv_blocks)
    servers.append(ours)
    ours.start()
    named = {"vllm": default, "vllm+augserve": ours}
    vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
    rows: list[dict[str, Any]] = []
    points = [(rep, i, rate) for rep in range(args.reps) for i, rate in enumerate(args.rates)]
    for k, (rep, i, rate) in enumerate(points):
        workload = build_workload(rate, args.duration, args.seed + 100 * rep + i, scale, vocab)
        order = list(named) if k % 2 == 0 else list(named)[::-1]
        for name in order:
            load = os.getloadavg()[0]
            result = run_point(named[name], workload, args)
            rows.append(point_row(rate, rep, name, result, slo, args, load))
            time.sleep(5.0)
    result = {
        "command": " ".join([sys.executable, *sys.argv]),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "commit": git_commit(),
        "load_avg_start": os.getloadavg(),
        "cpu": cpu_flags(),
        "iteration_s": iteration,
        "prefill_256_s": prefill,
        "slo": {"ttft_s": slo.ttft_slo, "norm_latency_s_per_token": slo.norm_latency_slo},
        "scale": vars(scale),
        "plugin": plugin_cfg,
        "client_sends_plan": args.predictor != "online",
        "vllm": vllm_version(),
        "servers": {name: " ".join(srv.argv[1:]) for name, srv in named.items()},
        "cpu_env": {k: os.environ.get(k, v) for k, v in CPU_ENV.items()},
        "rows": rows,
        "table": table(rows),
    }
    out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
