"""Decode through `augserve serve`, two source trees side by side (issue 38).

Each tree (`--tree NAME=PATH`, a checkout of augserve: the code before and after a
change) serves the same GGUF in its own server process (PYTHONPATH=PATH; the servers
inherit this environment: AUGSERVE_QUANT=1 for the quantized path), at each
`--threads` setting, rounds alternated (ABBA...), best of the rounds per cell:
batch-1 decode (ms per token of a 128-token streamed completion, from the first token:
what a client sees, the server's per-token path included) and the aggregate tokens/s of
8 concurrent 128 -> 128 completions. Beside them, the in-process decode step of the same
tree is `bench_quant_decode.py`'s; the difference is the server's per-token path.
The ratio of the trees' best figures is the result; the machine's load is recorded.

    python benchmarks/bench_server_decode.py --tree before=/tmp/base --tree after=. \
        [--model smollm2|PATH.gguf] [--threads 1,2] [--rounds 2] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_vs_llamacpp import HELD_OUT, Server, _stream  # noqa: E402

from augserve.bench.report import git_commit  # noqa: E402


def server_cmd(gguf: str, port: int, threads: int) -> list[str]:
    # -P: `python -m` would put the working directory first on sys.path, ahead of
    # PYTHONPATH, and every tree would run the checkout the bench was started from
    return [sys.executable, "-P", "-m", "augserve", "serve", "--model", gguf, "--port", str(port),
            "--threads", str(threads), "--max-num-seqs", "8", "--served-model-name", "m",
            "--profile", "default"]  # fmt: skip


async def measure(url: str) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=3600) as c:
        await _stream(c, url, "Hello", 8)  # warm up
        per_token = []
        for _ in range(3):
            _, dt, n = await _stream(c, url, "Once upon a time", 128)
            per_token.append(1e3 * dt / (n - 1))
        t0 = time.perf_counter()
        outs = await asyncio.gather(*(_stream(c, url, f"Story {i}: " + HELD_OUT[:400], 128)
                                      for i in range(8)))  # fmt: skip
        wall = time.perf_counter() - t0
    return {
        "decode_ms_per_token": min(per_token),
        "concurrent8_tok_s": sum(o[2] for o in outs) / wall,
    }


def run_cell(tree: str, gguf: str, threads: int, port: int, log: Path) -> dict[str, float]:
    env_before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(Path(tree).resolve())
    try:
        with Server(server_cmd(gguf, port, threads), port, log) as srv:
            return asyncio.run(measure(srv.url))
    finally:
        if env_before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = env_before


def resolve_gguf(model: str) -> str:
    if model == "smollm2":
        from augserve.engine.smollm2 import ensure_smollm2_gguf

        return str(ensure_smollm2_gguf())
    return model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", action="append", required=True, help="NAME=PATH")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--port", type=int, default=8931)
    p.add_argument("--log", default="/tmp/bench_server_decode.log")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    trees = [t.split("=", 1) for t in a.tree]
    gguf, threads = resolve_gguf(a.model), [int(t) for t in a.threads.split(",")]
    best: dict[str, dict[str, float]] = {}
    rows, t0 = [], time.time()
    for rnd in range(a.rounds):
        for name, path in trees if rnd % 2 == 0 else trees[::-1]:
            for th in threads:
                got = run_cell(path, gguf, th, a.port, Path(a.log))
                row = {"round": rnd, "tree": name, "threads": th, **got, "load": os.getloadavg()}
                rows.append(row)
                print(json.dumps(row), flush=True)
                cell = best.setdefault(f"{name}/t{th}", dict(got))
                cell["decode_ms_per_token"] = min(
                    cell["decode_ms_per_token"], got["decode_ms_per_token"]
                )
                cell["concurrent8_tok_s"] = max(cell["concurrent8_tok_s"], got["concurrent8_tok_s"])
    first = trees[0][0]
    ratios = {
        f"{name}_vs_{first}/t{th}": {
            "decode_speedup": best[f"{first}/t{th}"]["decode_ms_per_token"]
            / best[f"{name}/t{th}"]["decode_ms_per_token"],
            "concurrent8_speedup": best[f"{name}/t{th}"]["concurrent8_tok_s"]
            / best[f"{first}/t{th}"]["concurrent8_tok_s"],
        }
        for name, _ in trees[1:]
        for th in threads
    }
    out: dict[str, Any] = {
        "command": "python " + " ".join(sys.argv),
        "commit": git_commit(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "model": gguf,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("AUGSERVE_", "OMP_"))},
        "wall_s": time.time() - t0,
        "best": best,
        "ratios": ratios,
        "rows": rows,
    }
    print(json.dumps({"best": best, "ratios": ratios}, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
