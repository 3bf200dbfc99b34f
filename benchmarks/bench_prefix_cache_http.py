"""Through the HTTP API: a request repeating a 1,000-token prefix against the first one
that computed it, with the prefix cache on and off, alternated in one run.

Each repetition sends a fresh 1,000-token prefix plus a short suffix (the
first request, everything computed), then the same prefix with another suffix
(the repeat), both with `max_tokens=1` so the latency is the prefill; it
reports the medians, the repeat / first ratio (target with the cache: <= 0.5)
and the cached tokens `usage` reported. The server's engine is the same in
both modes; only `enable_prefix_caching` differs.

    .venv/bin/python benchmarks/bench_prefix_cache_http.py --reps 5 --out prefix.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

PREFIX = 1000


def build(model_dir: Path, preset: str, threads: int, caching: bool) -> Any:
    from augserve.engine.builder import EngineArgs, build_engine

    args = EngineArgs(model=str(model_dir), dtype="fp32", num_threads=threads,
                      num_device_blocks=1024, enable_prefix_caching=caching)  # fmt: skip
    return build_engine(args)


def run_mode(model_dir: Path, caching: bool, args: argparse.Namespace) -> dict[str, Any]:
    from augserve.engine.async_engine import AsyncLLMEngine
    from augserve.server.launch import BackgroundServer, ServeOptions, build_state

    engine = build(model_dir, args.preset, args.threads, caching)
    state = build_state(AsyncLLMEngine(engine), model_dir, ServeOptions(("m",)))
    server = BackgroundServer(state).start()
    first, repeat, cached = [], [], []
    try:
        with httpx.Client(timeout=600) as c:
            for rep in range(args.reps + 1):  # the first repetition warms up
                prefix = [3 + (rep * 7919 + 13 * i) % 400 for i in range(PREFIX)]
                times = []
                for suffix in ([5, 6, 7], [8, 9, 10, 11]):
                    body = {"model": "m", "prompt": prefix + suffix, "max_tokens": 1}
                    s = time.perf_counter()
                    r = c.post(server.url + "/v1/completions", json=body)
                    r.raise_for_status()
                    times.append(time.perf_counter() - s)
                if rep:
                    first.append(times[0])
                    repeat.append(times[1])
                    cached.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
    finally:
        server.stop()
    return {
        "first_ms": 1e3 * statistics.median(first),
        "repeat_ms": 1e3 * statistics.median(repeat),
        "repeat_over_first": statistics.median(b / a for a, b in zip(first, repeat, strict=True)),
        "cached_tokens": statistics.median(cached),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--preset", default="small", help="random Llama preset (make_model)")
    p.add_argument("--model-dir", default=None, help="a model directory instead")
    p.add_argument("--threads", type=int, default=1, help="torch threads of the engine")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", default=None, help="JSON results file")
    args = p.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from augserve.engine.make_model import make_model

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(args.model_dir) if args.model_dir else Path(tmp) / "model"
        if not args.model_dir:
            make_model("llama", args.preset, model_dir, overrides={"max_position_embeddings": 2048})
        results = {mode: run_mode(model_dir, mode == "on", args) for mode in ("on", "off")}
    for mode, r in results.items():
        print(
            f"prefix cache {mode:3s}: first {r['first_ms']:8.1f} ms"
            f"  repeat {r['repeat_ms']:8.1f} ms  repeat/first {r['repeat_over_first']:.3f}"
            f"  cached {r['cached_tokens']:.0f}"
        )
    if args.out:
        Path(args.out).write_text(json.dumps({"results": results, "args": vars(args)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
