"""Shared by the benchmark driver and its workers (imported from both virtual environments).

Workloads, deterministic prompts, the line protocol between driver and workers, and
the machine description printed with every result. No torch, no augserve, no vLLM.
"""

from __future__ import annotations

import json
import os
import platform
import random
import sys
from dataclasses import dataclass
from typing import Any

VOCAB_LOW = 3  # ids 0-2 are <s>, </s>, <pad> in `augserve make-model` models


@dataclass(frozen=True)
class Workload:
    """`num_prompts` random prompts of `prompt_len` tokens, `max_tokens` greedy tokens each.

    kind 'throughput' reports output tokens/s over the whole generate call; kind
    'decode1' reports ms per output token at batch 1: (time(max_tokens) - time(1)) /
    (max_tokens - 1), so the prefill cancels."""

    name: str
    num_prompts: int
    prompt_len: int
    max_tokens: int
    kind: str = "throughput"

    @property
    def label(self) -> str:
        if self.kind == "decode1":
            return f"batch-1 decode, {self.prompt_len}-token prompt"
        return f"{self.num_prompts} prompts x {self.prompt_len} tokens, {self.max_tokens} out"

    @property
    def unit(self) -> str:
        return "ms/token" if self.kind == "decode1" else "out tok/s"


WORKLOADS = {
    w.name: w
    for w in (
        Workload("b16", 16, 512, 64),
        Workload("b64", 64, 128, 128),
        Workload("decode1", 1, 512, 65, kind="decode1"),
    )
}


def prompts(w: Workload, vocab: int, seed: int = 0) -> list[list[int]]:
    """The same token ids in every worker (a seeded stdlib generator)."""
    rng = random.Random(f"{seed}-{w.name}")
    return [
        [rng.randrange(VOCAB_LOW, vocab) for _ in range(w.prompt_len)] for _ in range(w.num_prompts)
    ]


def cpu_flags() -> dict[str, Any]:
    """Model name, core count and the flags that change CPU inference speed."""
    flags: set[str] = set()
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                elif line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    keys = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
    return {
        "model": model,
        "cores": os.cpu_count(),
        "flags": {k: k in flags for k in keys},
        "bf16": "avx512_bf16" in flags or "amx_bf16" in flags,
        "amx": "amx_tile" in flags,
    }


def send(obj: dict[str, Any]) -> None:
    """One JSON message per line on stdout (workers) or a worker's stdin (driver)."""
    sys.stdout.write("@@ " + json.dumps(obj) + "\n")
    sys.stdout.flush()


def serve_requests(run: Any, info: dict[str, Any]) -> None:
    """Worker loop: announce `info`, then answer each request line until EOF or 'quit'."""
    send({"ready": True, **info})
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        try:
            send(run(req))
        except Exception as e:  # noqa: BLE001 - report every failure to the driver
            send({"error": f"{type(e).__name__}: {e}"})


def measure(
    generate: Any, w: Workload, vocab: int, max_tokens: int | None = None
) -> dict[str, Any]:
    """Time `generate(prompts, max_tokens) -> list[list[int]]` on workload `w`.

    Returns the figure in the workload's unit, the seconds, and the first 32 output ids
    of the first 4 prompts (the driver compares them across engines)."""
    import time

    ps = prompts(w, vocab)
    n = max_tokens or w.max_tokens
    t0 = time.perf_counter()
    out = generate(ps, n)
    sec = time.perf_counter() - t0
    if any(len(o) != n for o in out):
        raise RuntimeError(f"expected {n} tokens per prompt, got {sorted({len(o) for o in out})}")
    res: dict[str, Any] = {"seconds": sec, "ids": [o[:32] for o in out[:4]]}
    if w.kind == "decode1":
        t1 = time.perf_counter()
        generate(ps, 1)
        first = time.perf_counter() - t1
        res["value"] = 1e3 * (sec - first) / (n - 1)
        res["prefill_seconds"] = first
    else:
        res["value"] = len(ps) * n / sec
    return res
