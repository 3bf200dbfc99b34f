"""Diagnosis (not a comparison): one cell of the sessions-q1 config at one rate, the
server's /metrics scraped every 5 s into OUT/metrics.jsonl and, for augserve, through
`diag_site/sitecustomize.py`, the scheduler's thrash meter, growth-first share,
admissions and every preemption's victim logged every 200 iterations into
OUT/sched.jsonl (docs/results-vs-vllm.md, "sessions-q1").

    python benchmarks/vs_vllm/diag_sessions.py POLICY|vllm RATE DURATION_S SEED OUT_DIR

`vllm` is real vLLM; `serve:vllm` is `augserve serve --policy vllm` (our engine).

It uses the profile the q1 run fitted (runs/vs_vllm/sessions-q1/profile-augserve.json;
`DIAG_PROFILE=FILE` for another) and the q1 config's workload, memory, settings and
SLO (the server is told it, as `bench_tools.py` tells it); `DIAG_FLAGS="..."` adds
flags to `augserve serve` (e.g. `--pace-window 64`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
CONFIG = ROOT / "benchmarks/configs/vs-vllm-agent-sessions-q1.json"
MODEL = ROOT / "runs/calib/llama-small"
PROFILE = Path(
    os.environ.get("DIAG_PROFILE", ROOT / "runs/vs_vllm/sessions-q1/profile-augserve.json")
)


def scrape(url: str, path: Path, stop: threading.Event) -> None:
    """Every /metrics sample (histogram buckets left out), one JSON line each 5 s."""
    t0 = time.monotonic()
    with path.open("w") as fh:
        while not stop.wait(5.0):
            try:
                text = httpx.get(url + "/metrics", timeout=5).text
            except httpx.HTTPError:
                continue
            rows = [ln.split(" ") for ln in text.splitlines() if ln and ln[0] != "#"]
            keep = {r[0]: r[-1] for r in rows if "bucket" not in r[0]}
            fh.write(json.dumps({"t": time.monotonic() - t0, **keep}) + "\n")
            fh.flush()


def main() -> None:
    policy, rate, duration, seed = (
        sys.argv[1],
        float(sys.argv[2]),
        float(sys.argv[3]),
        int(sys.argv[4]),
    )
    out = Path(sys.argv[5])
    out.mkdir(parents=True, exist_ok=True)
    real_vllm, policy = policy == "vllm", policy.removeprefix("serve:")
    sys.argv = ["bench_tools.py", "--config", str(CONFIG), "--model", str(MODEL),
                "--out", str(out / "x.json")]  # fmt: skip
    import bench_tools as bt
    from session_loop import augserve_turn_extras, plain_turn_extras, replay_agents
    from tool_workload import Scale, build_workload

    args = bt.parse_args()
    args.model = str(MODEL)
    servers: list[Any] = []
    if real_vllm:
        srv = bt.start(bt.vllm_server(args, out / "server.log"), servers)
    else:
        slo = bt.slo_config(args.cfg)
        srv = bt.augserve_server(args, policy, out / "server.log", PROFILE, slo, "online")
        srv.argv += os.environ.get("DIAG_FLAGS", "").split()
        srv.env = {**srv.env, "PYTHONPATH": str(HERE / "diag_site"),
                   "AUGSERVE_DIAG_LOG": str(out / "sched.jsonl")}  # fmt: skip
        bt.start(srv, servers)
    stop = threading.Event()
    threading.Thread(target=scrape, args=(srv.base_url, out / "metrics.jsonl", stop)).start()
    vocab = json.loads((MODEL / "config.json").read_text())["vocab_size"]
    scale = Scale(length=args.length_scale, time=args.time_scale)
    work = build_workload(rate, duration, seed, scale, vocab, args.workload)
    extras = plain_turn_extras if real_vllm else augserve_turn_extras
    load = os.getloadavg()[0]
    args.duration = duration
    try:
        result, turns = asyncio.run(
            replay_agents(srv.base_url, "m", work, duration + args.drain, extras)
        )
    finally:
        stop.set()
        for s in servers:
            s.stop()
    row = bt.row_for(rate, policy, result, bt.slo_config(args.cfg), args, load, turns)
    (out / "row.json").write_text(json.dumps(row, indent=2))
    print(f"{len(work)} sessions; {out}")


if __name__ == "__main__":
    main()
