"""Time to first token of `augserve serve` under load: engine steps in a worker thread
(the default) against steps on the event loop, alternated in one run.

With the step on the loop thread, the HTTP stack (accept, read, parse, tokenise,
hand the request to the engine) advances only between steps, one event-loop turn
at a time, so a new request waits several steps before it is even scheduled.
Each mode runs a live server on the same engine and model: `--load` streaming
requests decode in the background while `--probes` short requests are sent one
after the other; it prints the probes' median and p90 latency (one token each)
and the background decode rate, per mode, best of `--reps`.

    .venv/bin/python benchmarks/bench_server_ttft.py --reps 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from augserve.bench.report import git_commit

MODES = {"thread": True, "loop": False}


def build(model_dir: Path, preset: str, threads: int) -> Any:
    from augserve.engine.builder import EngineArgs, build_engine
    from augserve.engine.make_model import make_model

    make_model("llama", preset, model_dir)
    args = EngineArgs(
        model=str(model_dir), dtype="fp32", num_threads=threads, num_device_blocks=512
    )
    return build_engine(args)


def _background(url: str, n_tokens: int, done: list[int], stop: threading.Event) -> None:
    body = {"model": "m", "prompt": "hello " * 32, "max_tokens": n_tokens, "ignore_eos": True}
    body["stream"] = True
    with httpx.Client(timeout=300) as c, c.stream("POST", url + "/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if stop.is_set():
                return
            if line.startswith("data: {"):
                done[0] += 1


def run_mode(engine: Any, model_dir: Path, in_thread: bool, args: argparse.Namespace) -> dict:
    from augserve.engine.async_engine import AsyncLLMEngine
    from augserve.server.launch import BackgroundServer, ServeOptions, build_state

    state = build_state(
        AsyncLLMEngine(engine, step_in_thread=in_thread), model_dir, ServeOptions(("m",))
    )
    server = BackgroundServer(state).start()
    counter, stop = [0], threading.Event()
    load = [
        threading.Thread(target=_background, args=(server.url, args.load_tokens, counter, stop))
        for _ in range(args.load)
    ]
    try:
        for t in load:
            t.start()
        time.sleep(args.warmup)
        c0, t0 = counter[0], time.perf_counter()
        lat = []
        with httpx.Client(timeout=120) as c:
            for _ in range(args.probes):
                body = {"model": "m", "prompt": "probe " * 8, "max_tokens": 1}
                s = time.perf_counter()
                c.post(server.url + "/v1/completions", json=body).raise_for_status()
                lat.append(time.perf_counter() - s)
        rate = (counter[0] - c0) / (time.perf_counter() - t0)
    finally:
        stop.set()
        server.stop()
        for t in load:
            t.join(60)
    lat.sort()
    return {
        "probe_median_ms": 1e3 * statistics.median(lat),
        "probe_p90_ms": 1e3 * lat[int(0.9 * (len(lat) - 1))],
        "load_tok_s": rate,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--preset", default="small")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the engine")
    p.add_argument("--load", type=int, default=4, help="background decoding requests")
    p.add_argument("--load-tokens", type=int, default=1500)
    p.add_argument("--probes", type=int, default=20)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--out", default=None, help="JSON results file")
    args = p.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    with tempfile.TemporaryDirectory() as tmp:
        engine = build(Path(tmp) / "model", args.preset, args.threads)
        best: dict[str, dict] = {}
        for rep in range(args.reps):
            order = list(MODES) if rep % 2 == 0 else list(reversed(MODES))
            for mode in order:
                r = run_mode(engine, Path(tmp) / "model", MODES[mode], args)
                print(f"rep {rep} {mode:6s} " + json.dumps({k: round(v, 1) for k, v in r.items()}))
                if mode not in best or r["probe_median_ms"] < best[mode]["probe_median_ms"]:
                    best[mode] = r
    t, lp = best["thread"], best["loop"]
    print(f"\nbest of {args.reps}: probe latency (1 token, {args.load} requests decoding)")
    for mode, r in best.items():
        print(f"  {mode:6s} median {r['probe_median_ms']:7.1f} ms  p90 {r['probe_p90_ms']:7.1f} ms"
              f"  background {r['load_tok_s']:6.1f} tok/s")  # fmt: skip
    ratio = lp["probe_median_ms"] / t["probe_median_ms"]
    print(f"  loop / thread median latency: {ratio:.2f}x; background decode thread/loop:"
          f" {t['load_tok_s'] / max(lp['load_tok_s'], 1e-9):.2f}x")  # fmt: skip
    if args.out:
        meta = {"command": " ".join(sys.argv), "commit": git_commit() or None,
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "load_avg_at_end": os.getloadavg()}  # fmt: skip
        Path(args.out).write_text(
            json.dumps({"best": best, "args": vars(args), "meta": meta}, indent=1)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
