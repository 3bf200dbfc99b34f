"""A bounded soak test of `augserve serve`: N minutes of mixed traffic with tool calls,
client disconnects, failing and timing-out tools, and an MCP server killed now and then.

    python benchmarks/soak_server.py --minutes 30            # the full run (quiet machine)
    python benchmarks/soak_server.py --minutes 1 --window 20 --out docs/soak/soak-smoke.json
    python benchmarks/soak_server.py --minutes 10 --hostile 0.2 --out docs/soak/soak-hostile.json

The server runs in its own process (a tiny random-weight Llama with a ChatML template,
the real engine, HTTP stack, tool registry and MCP supervisor). Random weights never
write tool calls, so the server's sampler follows a script chosen by each request's
seed (`soak_fixture.SoakSampler`): plain text, or a call of a given tool then an answer. The MCP
server (stdio, `soak_fixture.py --mcp`) has a `crash` tool that ends its process; the
supervisor must start it again for the next MCP call. `--hostile W` mixes in, with
weight W in all, the hostile requests of `bench_adversarial.py` (a 200,000-value
enum, 2,000 tools with tool_choice "required", a 3.9 MB /tokenize: each must get
its 400; a distinct small schema each time: must be served; `--hostile-kinds schema`
sends one kind only), and /health is probed
twice a second throughout. Reports: requests sent and lost (no complete answer, or
a hostile request without its expected status; must be 0), errors by kind,
/health's p50/p99/max, the server's RSS slope (MiB/hour,
fitted after the first window), KV blocks back to 0 at the end, and p50/p99 latency
per window. `memory` says where RSS went (soak_memory.py: the grammar cache, glibc's
heap used and free, with `--tracemalloc` Python's allocations by source line).
Writes everything as JSON (`--out`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from soak_fixture import HOSTILE, KINDS, MODEL, SCENARIOS, make_model_dir, write_tools
from soak_memory import memory_report, robust_slope_per_hour, slope_per_hour

HERE = Path(__file__).resolve().parent


def hostile_request(kind: str, n: int) -> tuple[str, dict[str, Any], int]:
    """(path, body, the status it must get) of hostile request number `n`."""
    user = [{"role": "user", "content": "Hi"}]
    if kind == "hostile_tokenize":
        return "/tokenize", {"prompt": "All work and no play makes Jack a dull boy. " * 88_000}, 400
    if kind == "hostile_tools":
        params = {"type": "object", "properties": {"x": {"type": "integer"}}}
        tools = [{"type": "function", "function": {"name": f"t{k}", "parameters": params}}
                 for k in range(2000)]  # fmt: skip
        body: dict[str, Any] = {"model": MODEL, "messages": user, "tools": tools,
                                "tool_choice": "required"}  # fmt: skip
        return "/v1/chat/completions", body, 400
    if kind == "hostile_enum":
        schema: dict[str, Any] = {"type": "string", "enum": [f"v{k}" for k in range(200_000)]}
        status = 400
    else:  # a distinct small schema each time: compiled, served, the cache bounded
        schema = {"type": "object", "properties": {f"f{n}": {"type": "integer"}}}
        status = 200
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    body = {"model": MODEL, "messages": user, "max_tokens": 8, "response_format": fmt}
    return "/v1/chat/completions", body, status


# --- the clients -------------------------------------------------------------------------
def hostile_weights(hostile: float, kinds: list[str] | None = None) -> dict[str, float]:
    """Each scenario's weight: the hostile weight `hostile` split evenly among `kinds`
    (short names, e.g. "schema"; default all four), the other hostile kinds 0."""
    chosen = [f"hostile_{k}" for k in kinds] if kinds else HOSTILE
    unknown = sorted(set(chosen) - set(HOSTILE))
    if unknown:
        raise ValueError(f"hostile_kinds: unknown {unknown}; known {HOSTILE}")
    weights = {k: SCENARIOS[k][0] for k in KINDS}
    for k in chosen:
        weights[k] = hostile / len(chosen)
    return weights


class Soak:
    def __init__(
        self,
        url: str,
        pid: int,
        window: float,
        seed: int,
        hostile: float = 0.0,
        hostile_kinds: list[str] | None = None,
    ) -> None:
        self.url = url
        self.weights = hostile_weights(hostile, hostile_kinds)
        self.health: list[tuple[float, float, int]] = []  # (time, latency, status)
        self.pid = pid
        self.window = window
        self.rng = random.Random(seed)
        self.records: list[dict[str, Any]] = []
        self.rss: list[tuple[float, float]] = []
        self.t0 = time.monotonic()
        self.counter = 0

    def pick(self) -> tuple[str, int]:
        kind = self.rng.choices(KINDS, [self.weights[k] for k in KINDS])[0]
        self.counter += 1
        return kind, (1000 + self.counter) * len(KINDS) + KINDS.index(kind)

    async def one(self, client: Any) -> None:
        kind, seed = self.pick()
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 48 if SCENARIOS[kind][1] is None else 200,
            "seed": seed,
            "stream": kind in ("stream", "disconnect"),
            "server_tools": "all",  # the scripted calls name the server's tools
        }
        start = time.monotonic()
        rec: dict[str, Any] = {"kind": kind, "start": start - self.t0, "ok": False}
        try:
            if kind in HOSTILE:
                path, hbody, want = hostile_request(kind, seed)
                r = await client.post(self.url + path, json=hbody)
                rec["status"] = r.status_code
                rec["ok"] = r.status_code == want
            elif body["stream"]:
                await self._stream(client, body, rec, cut=kind == "disconnect")
            else:
                r = await client.post(self.url + "/v1/chat/completions", json=body)
                rec["status"] = r.status_code
                rec["ok"] = r.status_code == 200 and r.json()["choices"][0]["finish_reason"]
        except Exception as exc:  # a lost request
            rec["error"] = f"{type(exc).__name__}: {exc}"
        rec["latency"] = time.monotonic() - start
        self.records.append(rec)

    async def _stream(
        self, client: Any, body: dict[str, Any], rec: dict[str, Any], cut: bool
    ) -> None:
        async with client.stream("POST", self.url + "/v1/chat/completions", json=body) as r:
            rec["status"] = r.status_code
            n = 0
            async for line in r.aiter_lines():
                n += line.startswith("data: {")
                if cut and n >= 2:
                    rec["ok"] = "disconnected"
                    return  # leaving the block closes the connection mid-stream
                if line == "data: [DONE]":
                    rec["ok"] = r.status_code == 200

    async def sample_rss(self, until: float) -> None:
        while time.monotonic() < until:
            status = Path(f"/proc/{self.pid}/status").read_text()
            kib = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS"))
            self.rss.append((time.monotonic() - self.t0, kib / 1024))
            await asyncio.sleep(5)

    async def probe_health(self, client: Any, until: float) -> None:
        while time.monotonic() < until:
            start = time.monotonic()
            try:
                status = (await client.get(self.url + "/health")).status_code
            except Exception:
                status = 0
            self.health.append((start - self.t0, time.monotonic() - start, status))
            await asyncio.sleep(0.5)

    async def run(self, minutes: float, concurrency: int) -> None:
        import httpx

        until = self.t0 + minutes * 60
        async with httpx.AsyncClient(timeout=120) as client:

            async def worker() -> None:
                while time.monotonic() < until:
                    await self.one(client)

            workers = (worker() for _ in range(concurrency))
            await asyncio.gather(self.sample_rss(until), self.probe_health(client, until), *workers)


def report(soak: Soak, final: dict[str, float], minutes: float) -> dict[str, Any]:
    import numpy as np

    recs = soak.records
    lost = [r for r in recs if not r["ok"]]
    windows = []
    n_win = max(1, int(np.ceil(minutes * 60 / soak.window)))
    for w in range(n_win):
        lat = [r["latency"] for r in recs
               if w * soak.window <= r["start"] < (w + 1) * soak.window
               and r["kind"] != "disconnect" and r["kind"] not in HOSTILE]  # fmt: skip
        if lat:
            windows.append({"window": w, "start_s": w * soak.window, "requests": len(lat),
                            "p50_s": float(np.percentile(lat, 50)),
                            "p99_s": float(np.percentile(lat, 99))})  # fmt: skip
    after = [(t, m) for t, m in soak.rss if t >= min(soak.window, minutes * 30)]
    slope = slope_per_hour(after)
    return {
        "minutes": minutes,
        "requests": len(recs),
        "by_kind": {k: sum(r["kind"] == k for r in recs) for k in KINDS},
        "health": _health_summary(soak.health),
        "lost": len(lost),
        "lost_examples": lost[:5],
        "rss_mib_start": soak.rss[0][1] if soak.rss else None,
        "rss_mib_end": soak.rss[-1][1] if soak.rss else None,
        "rss_slope_mib_per_hour": slope,
        "rss_robust_slope_mib_per_hour": robust_slope_per_hour(after),
        "final": final,
        "windows": windows,
    }


def _health_summary(probes: list[tuple[float, float, int]]) -> dict[str, Any]:
    import numpy as np

    ms = [lat * 1000 for _, lat, _ in probes]
    if not ms:
        return {"probes": 0}
    return {"probes": len(ms), "not_200": sum(s != 200 for _, _, s in probes),
            "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "max_ms": max(ms)}  # fmt: skip


def scrape(url: str) -> dict[str, float]:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def wait_idle(url: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(url)
        busy = sum(m.get(f"augserve_num_requests{{state={s}}}", 0)
                   for s in ("waiting", "running", "paused"))  # fmt: skip
        used = (
            m["augserve_kv_blocks_used{location=device}"]
            + m["augserve_kv_blocks_used{location=host}"]
        )
        if (busy == 0 and used == 0) or time.monotonic() > deadline:
            return {"requests_live": busy, "kv_blocks_used": used,
                    "mcp_connects": m.get("augserve_tool_server_connects_total{server=soak}", 0),
                    "tool_calls": sum(v for k, v in m.items()
                                      if k.startswith("augserve_tool_calls_total")),
                    "tool_errors": {k[len("augserve_tool_errors_total"):]: v
                                    for k, v in m.items()
                                    if k.startswith("augserve_tool_errors_total")}}  # fmt: skip
        time.sleep(0.5)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--window", type=float, default=300.0, help="seconds per latency window")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--hostile", type=float, default=0.0, metavar="W",
                   help="weight of the hostile requests, in all (the others weigh 1)")  # fmt: skip
    p.add_argument("--hostile-kinds", default=None, metavar="K,K",
                   help="only these hostile kinds of enum, tools, tokenize, schema")  # fmt: skip
    p.add_argument("--out", default="docs/soak/soak.json")
    p.add_argument("--grammar-cache-mib", type=float, default=None,
                   help="the server's --grammar-cache-bytes in MiB (default its own)")  # fmt: skip
    p.add_argument("--memory-interval", type=float, default=30.0,
                   help="seconds between the server's memory samples")  # fmt: skip
    p.add_argument("--tracemalloc", action="store_true",
                   help="trace the server's Python allocations (slower)")  # fmt: skip
    p.add_argument("--malloc-tuning", action=argparse.BooleanOptionalAction, default=True,
                   help="the server's --malloc-tuning (default on, as augserve serve)")  # fmt: skip
    a = p.parse_args()
    import httpx

    root = Path(tempfile.mkdtemp(prefix="soak-"))
    model_dir, tools = make_model_dir(root), write_tools(root)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    log = (root / "server.log").open("w")
    cache = None if a.grammar_cache_mib is None else int(a.grammar_cache_mib * 2**20)
    opts = {"grammar_cache_bytes": cache, "memory_interval": a.memory_interval,
            "memory_file": str(root / "memory.json"), "tracemalloc": a.tracemalloc,
            "malloc_tuning": a.malloc_tuning}  # fmt: skip
    fixture = str(HERE / "soak_fixture.py")
    argv = [sys.executable, fixture, "--serve", str(port), model_dir, tools, json.dumps(opts)]
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the server exited: {(root / 'server.log').read_text()}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the server did not start")
            time.sleep(0.5)
        kinds = a.hostile_kinds.split(",") if a.hostile_kinds else None
        soak = Soak(url, proc.pid, a.window, a.seed, a.hostile, kinds)
        asyncio.run(soak.run(a.minutes, a.concurrency))
        result = report(soak, wait_idle(url), a.minutes)
        warmup = min(a.window, a.minutes * 30)
        result["memory"] = memory_report(root / "memory.json", warmup)
        proc.send_signal(signal.SIGTERM)
        result["exit_code"] = proc.wait(60)
        result["command"] = " ".join(["python", "benchmarks/soak_server.py", *sys.argv[1:]])
        result["cpu"] = os.cpu_count()
        result["load_avg_at_end"] = os.getloadavg()
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "lost_examples"}, indent=1))
    ok = result["lost"] == 0 and result["final"]["kv_blocks_used"] == 0 and result["exit_code"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
