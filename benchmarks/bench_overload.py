"""Overload without collapse: the livelock case of issue 34, per policy, through
`augserve serve` as a user starts it.

The random default model (`AUGSERVE_DEFAULT_MODEL=random`), `--num-device-blocks 512`
(8,192 tokens of KV) and 60 concurrent chat requests of `max_tokens` 400 with
`ignore_eos`, no tools: far more KV than the pool holds, so the scheduler must
preempt. Each policy gets a fresh server (`--profile default`: no start-up fit, the
same latency model for every policy); the table gives the time until the last
request finished, how many finished within `--timeout`, the preemptions and the
recomputed tokens from `/metrics`, and the time over `vllm`'s in the same run (the
issue's bound: at most 3x). What the scheduler knew: the server's default online
predictor (its 64-token output prior; the requests run 400).

    .venv/bin/python benchmarks/bench_overload.py --out docs/data/overload.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from augserve.bench.report import git_commit
from augserve.sched.policies import POLICIES

ORDER = ["vllm", *sorted(p for p in POLICIES if p != "vllm")]


def start(policy: str, port: int, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    cli = "from augserve.cli import main; raise SystemExit(main())"
    cmd = [sys.executable, "-c", cli, "serve", "--port", str(port),
           "--policy", policy, "--num-device-blocks", str(args.blocks), "--profile", "default",
           "--threads", str(args.threads)]  # fmt: skip
    env = {**os.environ, "AUGSERVE_DEFAULT_MODEL": "random"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{policy}: server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"{policy}: no /health within 600 s")


async def one(client: httpx.AsyncClient, k: int, args: argparse.Namespace) -> float | None:
    body = {
        "model": "augserve-default",
        "messages": [{"role": "user", "content": f"Write a long story, number {k}."}],
        "max_tokens": args.max_tokens,
        "ignore_eos": True,
    }
    t0 = time.monotonic()
    r = await client.post("/v1/chat/completions", json=body)
    r.raise_for_status()
    return time.monotonic() - t0


def metrics(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        for name in ("augserve_preemptions_total", "augserve_recomputed_tokens_total"):
            if line.startswith(name):
                key = line.split(" ")[0]
                out[key] = float(line.split(" ")[-1])
    return out


def run_policy(policy: str, port: int, args: argparse.Namespace) -> dict[str, Any]:
    proc = start(policy, port, args)
    url = f"http://127.0.0.1:{port}"

    async def main() -> list[Any]:
        async with httpx.AsyncClient(base_url=url, timeout=args.timeout) as c:
            tasks = [one(c, k, args) for k in range(args.requests)]
            return await asyncio.gather(*tasks, return_exceptions=True)

    try:
        t0 = time.monotonic()
        done = asyncio.run(main())
        wall = time.monotonic() - t0
        times = [d for d in done if isinstance(d, float)]
        m = metrics(url)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {
        "policy": policy,
        "finished": len(times),
        "last_finish_s": max(times) if len(times) == args.requests else None,
        "wall_s": wall,
        "preemptions": {k.split('"')[1]: v for k, v in m.items() if "reason" in k},
        "recomputed_tokens": m.get("augserve_recomputed_tokens_total", 0.0),
        "load_avg": os.getloadavg(),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--policies", default=",".join(ORDER))
    p.add_argument("--requests", type=int, default=60)
    p.add_argument("--max-tokens", type=int, default=400)
    p.add_argument("--blocks", type=int, default=512)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument("--port", type=int, default=8090)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    rows = []
    for i, policy in enumerate(args.policies.split(",")):
        row = run_policy(policy, args.port + i, args)
        rows.append(row)
        print(json.dumps(row), flush=True)
    base = next((r["last_finish_s"] for r in rows if r["policy"] == "vllm"), None)
    print(f"\n{'policy':16s} {'finished':>8s} {'last s':>8s} {'x vllm':>7s} "
          f"{'preempt':>8s} {'recomputed':>10s}")  # fmt: skip
    for r in rows:
        last = r["last_finish_s"]
        ratio = f"{last / base:.2f}" if last and base else "-"
        r["time_over_vllm"] = last / base if last and base else None
        taken = int(sum(r["preemptions"].values()))
        print(f"{r['policy']:16s} {r['finished']:8d} {last or float('nan'):8.1f} {ratio:>7s} "
              f"{taken:8d} {int(r['recomputed_tokens']):10d}")  # fmt: skip
    if args.out:
        served = args.requests * args.max_tokens
        meta = {"command": " ".join(sys.argv), "commit": git_commit() or None,
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "load_avg_at_end": os.getloadavg(), "generated_tokens": served,
                "predictor": "online (the server's default)"}  # fmt: skip
        Path(args.out).write_text(json.dumps({"rows": rows, "args": vars(args), "meta": meta},
                                             indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
