"""Where `augserve serve --engine vllm` spends a first token, against plain vLLM's server
(issue 40's diagnosis; not a comparison: one run, no repeats).

    VLLM_VENV=... .venv/bin/python benchmarks/vs_vllm/diag_first_token.py \\
        --config benchmarks/configs/vs-vllm-serve-engine-vllm-r2.json \\
        --model runs/calib/llama-small --rate 6.5 --policy vllm --out runs/vs_vllm/first-token

Each server (plain vLLM; ours over vLLM with `--policy`), one at a time, with the
config's settings (bench_servers.py):

1. idle: `--idle` sequential requests of a fresh 256-token prompt (no prefix to reuse),
   8 tokens each, streamed: the client's TTFT at batch 1. Ours twice: a plain request,
   and one with a one-segment plan (`augserve_segments`), which runs as vLLM's
   resumable streaming-input session as every scripted request of the tool workload.
2. loaded: the tool workload at `--rate` for `--duration` s (seed `--seed`), as the
   comparison replays it (plain vLLM: calls on the client; ours: on the server): TTFT
   mean / p50 / p95 and attainment under the config's SLO. Ours also reports the TTFT
   its own metrics measured (`augserve_time_to_first_token_seconds`: from the engine's
   `generate` to the first token it took from vLLM), so that the client's TTFT splits
   into the engine's part and the server's (HTTP, the request pipeline, the stream), and
the server's part by stage (`augserve_request_stage_seconds`: body, preparation queue,
preparation, back to the loop, to the engine, the engine, to the client; with the
event loop's lag), as counts, means and the histogram bound holding 50 / 95 / 99%.
`--ours-only PROFILE` skips plain vLLM and prices ours with an earlier run's profile.
Each loaded phase also records who used the cores (`proc_cpu.py`: CPU seconds of the
server's process tree by process, and of this client) and how late the client's own
event loop ran: a client that cannot keep up inflates every TTFT it measures.

With `--spy` (py-spy, `$PY_SPY`), the loaded phase of ours is sampled: every thread
(`spy-all.txt`) and the GIL holder only (`spy-gil.txt`), raw format.

With a config whose servers mark requests (`settings.measure = "server"`, both servers
load `augserve.bench.request_marks`), each loaded row also splits the client's time to
first token into its pieces (`split`: connect, send, to_server, server, to_client;
`server_read.first_token_split`), from the client's transport events and the server's
marks on one clock: what of a first token is the server's and what the client's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_servers import augserve_vllm_server, measure, vllm_server  # noqa: E402
from bench_tools_protocol import apply_config, slo_config  # noqa: E402
from managed_server import ManagedServer  # noqa: E402
from proc_cpu import cpu_delta, self_cpu, tree_cpu, with_loop_lag  # noqa: E402
from server_read import first_token_split, stats, take_marks  # noqa: E402
from tool_workload import (  # noqa: E402
    VOCAB_LOW,
    Scale,
    build_workload,
    complete,
    replay,
    replay_scripted,
    summarize,
)
from tools_profile import write_profile  # noqa: E402

from augserve.bench.protocol import ComparisonConfig  # noqa: E402
from augserve.bench.report import git_commit  # noqa: E402


async def idle_ttfts(base_url: str, n: int, vocab: int, extra: dict[str, Any]) -> list[float]:
    """`n` sequential streamed requests, each a fresh 256-token prompt, 8 tokens out."""
    rng = random.Random(0)
    out = []
    async with httpx.AsyncClient(base_url=base_url, timeout=120.0) as client:
        for _ in range(n + 1):  # the first warms up
            ctx = [rng.randrange(VOCAB_LOW, vocab) for _ in range(256)]
            t0 = time.monotonic()
            turn = await complete(client, "m", ctx, 8, dict(extra))
            out.append((turn.first or time.monotonic()) - t0)
    return out[1:]


def server_ttft(base_url: str) -> tuple[float, float]:
    """(sum, count) of our server's TTFT histogram."""
    text = httpx.get(base_url + "/metrics", timeout=30.0).text
    vals = {}
    for line in text.splitlines():
        if line.startswith("augserve_time_to_first_token_seconds_"):
            name, value = line.split()[:2]
            vals[name.split("{")[0].rsplit("_", 1)[1]] = float(value)
    return vals.get("sum", 0.0), vals.get("count", 0.0)


def server_stages(base_url: str) -> dict[str, dict[str, float]]:
    """Our server's stage histograms and its loop lag (`augserve/server/stages.py`): per
    stage (or `loop_lag`) its sum, count and cumulative bucket counts by bound."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(base_url + "/metrics", timeout=30.0).text
    out: dict[str, dict[str, float]] = {}
    names = {"augserve_request_stage_seconds", "augserve_event_loop_lag_seconds"}
    for fam in text_string_to_metric_families(text):
        if fam.name not in names:
            continue
        for smp in fam.samples:
            key = smp.labels.get("stage", "loop_lag")
            field = smp.name.rsplit("_", 1)[1]
            if field == "bucket":
                field = "le=" + smp.labels["le"]
            out.setdefault(key, {})[field] = smp.value
    return out


def stage_deltas(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Per stage over a phase: count, mean, and the bucket bound holding 50 / 95 / 99%."""
    rows = {}
    for key, now in after.items():
        was = before.get(key, {})
        d = {k: v - was.get(k, 0.0) for k, v in now.items()}
        n = d.get("count", 0.0)
        row = {"count": n, "mean": d.get("sum", 0.0) / n if n else 0.0}
        bounds = sorted((float(k[3:]), v) for k, v in d.items() if k.startswith("le="))
        for q in (0.5, 0.95, 0.99):
            row[f"p{round(q * 100)}_le"] = next((b for b, c in bounds if c >= q * n), 0.0)
        rows[key] = row
    return rows


def spy(pid: int, seconds: float, out: Path) -> list[subprocess.Popen[bytes]]:
    exe = os.environ.get("PY_SPY", "py-spy")
    base = [exe, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "50", "--threads",
            "--nonblocking", "-f", "raw"]  # fmt: skip
    return [subprocess.Popen([*base, "--idle", "-o", str(out / "spy-all.txt")]),
            subprocess.Popen([*base, "--gil", "-o", str(out / "spy-gil.txt")])]  # fmt: skip


def run_one(name: str, srv: ManagedServer, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
    ours = name != "vllm"
    row: dict[str, Any] = {"server": name, "load_start": os.getloadavg()[0]}
    row["idle_plain"] = stats(asyncio.run(idle_ttfts(srv.base_url, args.idle, vocab, {})))
    if ours:
        plan = {"augserve_segments": [{"output_len": 8}]}
        row["idle_session"] = stats(asyncio.run(idle_ttfts(srv.base_url, args.idle, vocab, plan)))
    scale = Scale(length=args.length_scale, time=args.time_scale)
    work = build_workload(args.rate, args.duration, args.seed, scale, vocab, args.workload)
    before = server_ttft(srv.base_url) if ours else (0.0, 0.0)
    stages0 = server_stages(srv.base_url) if ours else {}
    spies = spy(srv.proc.pid, args.duration, out) if (ours and args.spy and srv.proc) else []
    deadline = args.duration + args.drain
    cpu0, me0, t0 = tree_cpu(srv.proc.pid) if srv.proc else {}, self_cpu(), time.monotonic()
    if ours:
        job = replay_scripted(srv.base_url, "m", work, deadline)
    else:
        job = replay(srv.base_url, "m", work, deadline)
    result, lag = asyncio.run(with_loop_lag(job))
    cpu1 = tree_cpu(srv.proc.pid) if srv.proc else {}
    usage = {
        "wall_s": round(time.monotonic() - t0, 1),
        "client_loop_lag": lag,
        "client_cpu_s": round(self_cpu() - me0, 2),
        "server_cpu_s": cpu_delta(cpu0, cpu1),
    }
    for p in spies:
        p.wait(timeout=120)
    if args.measure == "server":  # both servers mark: the first token's time piece by piece
        row["split"] = first_token_split(result, take_marks(srv.base_url))
    m = summarize(result.records, slo_config(args.cfg), deadline).to_dict()
    row["loaded"] = {k: m[k] for k in ("slo_attainment", "ttft_mean", "ttft_p50", "ttft_p95",
                                       "num_finished", "num_requests") if k in m}  # fmt: skip
    row["loaded"]["usage"] = usage
    if ours:
        s1, c1 = server_ttft(srv.base_url)
        row["loaded"]["server_ttft_mean"] = (s1 - before[0]) / max(1.0, c1 - before[1])
        row["loaded"]["stages"] = stage_deltas(stages0, server_stages(srv.base_url))
    row["load_end"] = os.getloadavg()[0]
    print(json.dumps(row), flush=True)
    return row


def plain_vllm(args: argparse.Namespace, out: Path, rows: list[dict[str, Any]]) -> Path:
    """Plain vLLM's row; the profile of its measured times, which prices our scheduler."""
    plain = vllm_server(args, out / "server-vllm.log")
    try:
        plain.start(start_timeout=600.0)
        times = measure(plain)
        rows.append(run_one("vllm", plain, args, out))
    finally:
        plain.stop()
    args.swap_bandwidth = 1e9  # no host pool
    return write_profile(args, times[0], times[1], out / "profile-vllm.json")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--rate", type=float, default=6.5)
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--policy", default="vllm", help="our scheduler's policy inside vLLM")
    p.add_argument("--idle", type=int, default=20)
    p.add_argument("--spy", action="store_true")
    p.add_argument("--out", required=True)
    p.add_argument(
        "--ours-only",
        metavar="PROFILE",
        help="skip plain vLLM: our server priced with this earlier run's profile",
    )
    args = p.parse_args()
    args.cfg = ComparisonConfig.from_dict(json.loads(Path(args.config).read_text()))
    apply_config(args, args.cfg)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, t0 = [], time.monotonic()
    prof = Path(args.ours_only) if args.ours_only else plain_vllm(args, out, rows)
    slo = slo_config(args.cfg)
    ours = augserve_vllm_server(args, args.policy, out / "server-ours.log", prof, slo, "online")
    try:
        ours.start(start_timeout=600.0)
        rows.append(run_one(f"augserve-vllm:{args.policy}", ours, args, out))
    finally:
        ours.stop()
    result = {"command": " ".join([sys.executable, *sys.argv]), "commit": git_commit(),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "wall_s": round(time.monotonic() - t0, 1), "rows": rows}  # fmt: skip
    (out / "first-token.json").write_text(json.dumps(result, indent=1))
    print(f"written to {out / 'first-token.json'}")


if __name__ == "__main__":
    main()
