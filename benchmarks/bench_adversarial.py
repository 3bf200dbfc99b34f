"""Hostile requests against `augserve serve`: while each one runs, a plain request's
latency and /health's, against the same with no hostile request, in one run.

    python benchmarks/bench_adversarial.py --window 20 --out docs/data/adversarial.json

The server is `augserve serve` on SmolLM2-135M-Instruct in its own process (port
8200 unless `--port`), started once; `--pythonpath DIR` runs it from another
checkout (e.g. an older commit, for a before/after). Per scenario, for `--window`
seconds: one client thread sends the hostile request again and again (each waits
for its answer), one probes /health every 0.1 s, one sends plain requests (a short
chat, 4 tokens) one after the other. Reports per scenario: the hostile answers'
status codes and median time, /health's p50/p99/max and the plain requests'
p50/p99 (ms), their ratios to the "none" scenario's, and the server's RSS after it.

Scenarios (the attacks of the issue that filed this work): a 200,000-value enum
(2.6 MB schema), the largest schema under the limits (1,000 enum values of 100
characters), 2,000 tools with `tool_choice: "required"`, a 3.9 MB /tokenize, a
1 MB chat message (tokenized, then over the context), 40,000 short messages (a
body whose validation is long: off the loop, `server/strict_json.py`), and 300
distinct small schemas (the grammar cache's bound). Timings from a busy machine are recorded with
the load average: compare ratios within one run, not numbers across runs.
"""

from __future__ import annotations

import argparse
import json
import json as _json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from augserve.bench.report import git_commit

MODEL = "smollm2"
Hostile = Callable[[httpx.Client, int], httpx.Response]


def _fmt(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def _chat(c: httpx.Client, **body: Any) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
            **body}  # fmt: skip
    return c.post("/v1/chat/completions", json=body)


def enum_200k(c: httpx.Client, i: int) -> httpx.Response:
    schema = {"type": "string", "enum": [f"v{i}-{k}" for k in range(200_000)]}
    return _chat(c, response_format=_fmt(schema))


def largest_allowed_schema(c: httpx.Client, i: int) -> httpx.Response:
    schema = {"type": "string", "enum": [f"{i:06d}-{k:04d}-" + "x" * 88 for k in range(1000)]}
    return _chat(c, response_format=_fmt(schema))


def tools_2000(c: httpx.Client, i: int) -> httpx.Response:
    params = {"type": "object", "properties": {"x": {"type": "integer"}}}
    tools = [
        {"type": "function", "function": {"name": f"t{i}_{k}", "parameters": params}}
        for k in range(2000)
    ]
    return _chat(c, tools=tools, tool_choice="required")


def tokenize_3_9mb(c: httpx.Client, i: int) -> httpx.Response:
    text = f"{i} All work and no play makes Jack a dull boy. " * 86_000  # under 4 MiB
    return c.post("/tokenize", json={"model": MODEL, "prompt": text})


def chat_1mb(c: httpx.Client, i: int) -> httpx.Response:
    text = f"{i} The quick brown fox jumps over the lazy dog. " * 22_000
    return _chat(c, messages=[{"role": "user", "content": text}])


def chat_40k_messages(c: httpx.Client, i: int) -> httpx.Response:
    messages = [{"role": "user", "content": f"note {k}"} for k in range(40_000)]
    return _chat(c, messages=messages)  # 1.2 MB: validated, then over the context


def distinct_schemas(c: httpx.Client, i: int) -> httpx.Response:
    schema = {"type": "object", "properties": {f"f{i}": {"type": "integer"}}, "required": [f"f{i}"]}
    return _chat(c, response_format=_fmt(schema), max_tokens=1)


DISTINCT = (largest_allowed_schema, distinct_schemas)  # each body new: each compiles
SCENARIOS: dict[str, Hostile | None] = {
    "none": None,
    "enum_200k": enum_200k,
    "largest_allowed_schema": largest_allowed_schema,
    "tools_2000_required": tools_2000,
    "tokenize_3_9mb": tokenize_3_9mb,
    "chat_1mb_message": chat_1mb,
    "chat_40k_messages": chat_40k_messages,
    "distinct_schemas": distinct_schemas,
}


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Sender:
    """Sends a hostile request: the same body each time (built once, before the window,
    so that building it does not take the client's GIL from its probes), except for
    `DISTINCT` scenarios, whose bodies differ by a counter."""

    def __init__(self, client: httpx.Client, hostile: Hostile) -> None:
        self.client, self.hostile, self.n = client, hostile, 0
        self.fixed = None if hostile in DISTINCT else _capture(hostile)

    def __call__(self) -> httpx.Response:
        self.n += 1
        if self.fixed is None:
            return self.hostile(self.client, self.n)
        path, body = self.fixed
        headers = {"content-type": "application/json"}
        return self.client.post(path, content=body, headers=headers)


def _capture(hostile: Hostile) -> tuple[str, bytes]:
    """The path and encoded body `hostile` sends."""
    seen: list[tuple[str, bytes]] = []

    class Recorder:
        def post(self, path: str, json: Any) -> Any:
            seen.append((path, _json.dumps(json).encode()))

    hostile(Recorder(), 0)  # type: ignore[arg-type]
    return seen[0]


class Probe(threading.Thread):
    """Calls `fn` until stopped (every `every` s at most), keeping each call's latency."""

    def __init__(self, fn: Callable[[], Any], stop: threading.Event, every: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.fn, self.stop, self.every = fn, stop, every
        self.lat: list[float] = []
        self.codes: list[int | str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                self.codes.append(self.fn().status_code)
            except httpx.HTTPError as exc:
                self.codes.append(type(exc).__name__)
            self.lat.append(time.perf_counter() - t0)
            self.stop.wait(max(0.0, self.every - self.lat[-1]))


def run_scenario(url: str, name: str, hostile: Hostile | None, window: float) -> dict[str, Any]:
    stop = threading.Event()
    hc, pc, xc = (httpx.Client(base_url=url, timeout=600) for _ in range(3))
    health = Probe(lambda: hc.get("/health"), stop, every=0.1)
    plain = Probe(lambda: _chat(pc, temperature=0.0), stop)
    bad = Probe(Sender(xc, hostile), stop) if hostile else None
    probes = [p for p in (health, plain, bad) if p is not None]
    for p in probes:
        p.start()
    time.sleep(window)
    stop.set()
    for p in probes:
        p.join(900)
    row: dict[str, Any] = {"scenario": name}
    for key, p in (("health", health), ("plain", plain)):
        ms = [x * 1000 for x in p.lat]
        row[f"{key}_n"] = len(ms)
        row[f"{key}_p50_ms"] = round(_pct(ms, 0.5), 1)
        row[f"{key}_p99_ms"] = round(_pct(ms, 0.99), 1)
        row[f"{key}_max_ms"] = round(max(ms), 1) if ms else None
        row[f"{key}_errors"] = sum(1 for c in p.codes if c != 200)
    if bad is not None:
        codes: dict[str, int] = {}
        for code in bad.codes:
            codes[str(code)] = codes.get(str(code), 0) + 1
        row["hostile_sent"] = len(bad.lat)
        row["hostile_codes"] = codes
        row["hostile_median_s"] = round(statistics.median(bad.lat), 3) if bad.lat else None
    return row


def warm_up(url: str) -> None:
    """Untimed: the first requests build what is built on first use (the grammar
    compiler; torch.compile's graphs, recompiled once batches of several requests come,
    which on a busy CPU takes minutes and would stall a scenario)."""
    with httpx.Client(base_url=url, timeout=3600) as c:
        for _ in range(2):
            _chat(c).raise_for_status()
        _chat(c, response_format={"type": "json_object"}).raise_for_status()

    def one(k: int) -> None:
        with httpx.Client(base_url=url, timeout=3600) as c:
            _chat(c, max_tokens=8 + k).raise_for_status()

    for n in (2, 3):
        threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def _metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=60).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def start_server(args: argparse.Namespace, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath
    # -P: `python -m` would put the working directory ahead of PYTHONPATH
    cmd = [sys.executable, "-P", "-m", "augserve", "serve", "--model", MODEL,
           "--port", str(args.port), "--profile", "default", "--threads", str(args.threads),
           "--log-level", "warning",
           *args.server_arg]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{args.port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("the server did not start")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--window", type=float, default=20.0, help="seconds per scenario")
    p.add_argument("--port", type=int, default=8200)
    p.add_argument("--threads", type=int, default=2, help="the server's torch threads")
    p.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    p.add_argument("--pythonpath", default=None, help="run the server from this checkout")
    p.add_argument("--server-arg", action="append", default=[], help="one more server flag")
    p.add_argument("--out", default=None, help="write the rows and provenance as JSON")
    args = p.parse_args()
    log = Path(tempfile.mkdtemp(prefix="adversarial-")) / "server.log"
    load_start = os.getloadavg()
    proc = start_server(args, log)
    url = f"http://127.0.0.1:{args.port}"
    rows = []
    try:
        warm_up(url)
        for name in args.scenarios:
            row = run_scenario(url, name, SCENARIOS[name], args.window)
            row["server_rss_mib"] = round(_rss_mib(proc.pid), 1)
            cache = _metric(url, "augserve_grammar_cache_bytes")
            row["grammar_cache_mib"] = round(cache / 2**20, 2)
            row["load_avg"] = os.getloadavg()[0]
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    base = next((r for r in rows if r["scenario"] == "none"), None)
    if base is not None:
        for r in rows:
            for key in ("health_p99_ms", "plain_p50_ms"):
                if base[key] and r[key] == r[key]:
                    r[key.replace("_ms", "_vs_none")] = round(r[key] / base[key], 2)
    if args.out:
        meta = {"command": " ".join(sys.argv), "commit": git_commit() or None,
                "server_pythonpath": args.pythonpath,
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "load_avg_at_start": load_start, "load_avg_at_end": os.getloadavg(),
                "cpu_count": os.cpu_count(), "cpu_flags": _cpu_flags(),
                "note": "a busy, shared machine (8 engineers on 2 cores): compare ratios "
                "within this run only"}  # fmt: skip
        Path(args.out).write_text(json.dumps({"rows": rows, "meta": meta}, indent=1) + "\n")


def _cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "fma")
                return [f for f in line.split(":", 1)[1].split() if f in wanted]
    except OSError:
        pass
    return []


if __name__ == "__main__":
    main()
