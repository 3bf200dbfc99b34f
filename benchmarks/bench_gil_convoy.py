"""The engine's steps beside Python work on another thread: what the GIL costs them.

    python -P benchmarks/bench_gil_convoy.py [--model DIR] [--rounds 3] [--out FILE]

In `augserve serve` the engine steps on its own thread while the event loop and the
preparation threads parse, render, tokenize and stream (docs/server.md, "The engine
loop"). Torch releases the GIL inside each op, so a step needs the GIL back after every
op; when another thread is running Python at that moment, CPython makes the step wait
until that thread lets go, for up to the interpreter's switch interval (5 ms by
default) per op. This measures it without a server: `LLM.generate` (N sequences,
greedy, one torch thread) on the main thread while a second thread runs pure Python in
bursts (`busy` ms of work, then `idle` ms asleep: the loop's share of a loaded server),
with the switch interval at its default and lower. Each row is output tokens per second
and its slowdown against the same generate with nothing beside it; every setting runs
once per round, rotated, best of `--rounds`. On two cores the second thread has a core
of its own, so without the GIL it would not slow the steps at all.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "runs" / "calib" / "llama-small"
# (busy ms, idle ms) of the second thread; None: nothing beside the engine
LOADS: list[tuple[float, float] | None] = [None, (1.0, 9.0), (5.0, 5.0), (20.0, 5.0)]
SWITCH_S = (0.005, 0.0005)


def burn(stop: threading.Event, busy_s: float, idle_s: float) -> None:
    """Pure Python (holds the GIL) for `busy_s`, then sleep (releases it) for `idle_s`."""
    while not stop.is_set():
        end = time.perf_counter() + busy_s
        n = 0
        while time.perf_counter() < end:
            n += 1
        time.sleep(idle_s)


def one_run(llm: Any, prompts: list[list[int]], params: Any, load: tuple[float, float] | None,
            switch_s: float) -> float:  # fmt: skip
    """Output tokens per second of one generate, with `load` beside it."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(switch_s)
    stop = threading.Event()
    worker = None
    if load is not None:
        worker = threading.Thread(target=burn, args=(stop, load[0] / 1e3, load[1] / 1e3))
        worker.start()
    try:
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params)
        wall = time.perf_counter() - t0
    finally:
        stop.set()
        if worker is not None:
            worker.join()
        sys.setswitchinterval(before)
    return sum(len(o.outputs[0].token_ids) for o in outs) / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--seqs", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from augserve import LLM, SamplingParams

    llm = LLM(args.model, policy="vllm", dtype="fp32", num_threads=1, block_size=32,
              num_device_blocks=256, max_batch_tokens=2048)  # fmt: skip
    vocab = llm.engine.runner.vocab_size
    prompts = [[3 + (i * 7919 + j * 104729) % (vocab - 3) for j in range(args.prompt_tokens)]
               for i in range(args.seqs)]  # fmt: skip
    params = SamplingParams(temperature=0.0, max_tokens=args.new_tokens, ignore_eos=True)
    one_run(llm, prompts, params, None, 0.005)  # warm-up
    settings = [(load, sw) for load in LOADS for sw in (SWITCH_S if load else SWITCH_S[:1])]
    best: dict[str, float] = {}
    every: dict[str, list[float]] = {}
    for r in range(args.rounds):
        k = r % len(settings)
        for load, sw in settings[k:] + settings[:k]:  # rotated: no setting always first
            key = "alone" if load is None else f"busy {load[0]:g} ms / idle {load[1]:g} ms"
            key += f", switch {sw * 1e3:g} ms"
            tps = one_run(llm, prompts, params, load, sw)
            every.setdefault(key, []).append(round(tps, 1))
            best[key] = max(best.get(key, 0.0), tps)
            print(f"round {r} {key}: {tps:.1f} tok/s", flush=True)
    alone = best["alone, switch 5 ms"]
    rows = [{"setting": k, "tok_s": round(v, 1), "slowdown": round(alone / v, 3),
             "rounds": every[k]} for k, v in best.items()]  # fmt: skip
    for row in rows:
        print(f"{row['setting']:42s} {row['tok_s']:8.1f} tok/s  x{row['slowdown']:.2f} slower")
    if args.out:
        out = {
            "command": " ".join([sys.executable, *sys.argv]),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "load": os.getloadavg(), "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(), "seqs": args.seqs,
            "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
            "rounds": args.rounds, "rows": rows,
        }  # fmt: skip
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
