"""Where a server process's resident memory goes, step by step, in one fresh process.

    python -P benchmarks/mem_breakdown.py --model FILE.gguf [--blocks 512] [--out F.json]

Steps, in the order the server takes them: `import torch`; the tokenizer (the
`tokenizers` library and the model's vocabulary, as `engine/tokenizer.py` loads it);
the server's modules (FastAPI, uvicorn, pydantic and ours); the engine (weights,
KV cache of `--blocks` blocks, buffers). The engine loads the tokenizer the server
uses: the tokenizer step's copy is freed before it, so that the engine's load reuses
that memory and its step shows the rest. Each step's figure is the growth of the
resident set (`/proc/self/statm`) over it; the steps add up to the total. Not a
timing: the machine's load does not change it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="a GGUF file or model directory")
    p.add_argument("--blocks", type=int, default=512, help="device KV blocks")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    steps: list[dict[str, Any]] = []
    last = start = rss_mb()

    def step(name: str) -> None:
        nonlocal last
        now = rss_mb()
        steps.append({"step": name, "mb": round(now - last, 1), "rss_mb": round(now, 1)})
        print(f"{name:<22} +{now - last:7.1f} MB  (resident {now:7.1f} MB)", flush=True)
        last = now

    import torch

    torch.set_num_threads(1)
    step("import torch")
    from augserve.engine.resolve import resolve_model
    from augserve.engine.tokenizer import Tokenizer

    model_dir = resolve_model(args.model)
    tok = Tokenizer(model_dir)
    vocab = tok.vocab_size
    step("tokenizer")
    import augserve.server.app  # noqa: F401
    import augserve.server.launch  # noqa: F401

    step("server modules")
    del tok  # the engine's own copy takes its place (module doc)
    from augserve.engine.builder import EngineArgs, build_engine

    engine = build_engine(EngineArgs(model=args.model, num_device_blocks=args.blocks))
    step("engine")
    result = {
        "command": " ".join([sys.executable, *sys.argv]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": str(args.model),
        "vocab": vocab,
        "blocks": args.blocks,
        "start_mb": round(start, 1),
        "total_mb": round(last, 1),
        "steps": steps,
        "engine_dtype": str(getattr(engine.runner, "dtype", "")),
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
