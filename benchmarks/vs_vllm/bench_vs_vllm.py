"""augserve's engine against vLLM's CPU engine (and HF `generate`), alternated in one run.

One loaded worker process per engine (vLLM in its own virtual environment, built on
demand by setup_env.sh; augserve and HF in the project's), each answering requests
one at a time; the driver alternates them workload by workload, rotating the order,
keeps the best of `--reps` per engine, and prints the figures, the ratios and the
machine's CPU flags (bf16 / AMX change the picture: do not mix figures across machines).

    .venv/bin/python benchmarks/vs_vllm/bench_vs_vllm.py --reps 2 --out runs/vs_vllm.json

Engines: augserve, vllm-eager, vllm-compiled, hf. Workloads (common.WORKLOADS):
b16 (16 x 512 tokens, 64 out), b64 (64 x 128, 128 out), decode1 (batch-1 decode
after a 512-token prompt, ms/token). fp32 throughout; vLLM's prefix cache is off.

Under the comparison protocol (docs/benchmarking.md, "Engine throughput under the
protocol") every setting comes from a committed config, each repeat is kept, and the
result adds each figure's and each paired ratio's mean and 95% interval and the load
at each repeat's start (`engine_protocol.py`):

    python benchmarks/vs_vllm/bench_vs_vllm.py \
        --config benchmarks/configs/engine-vs-vllm-hf-r1.json \
        --out docs/data/engine-vs-vllm-hf-r1.json

vLLM's environment: $VLLM_VENV when set, else benchmarks/vs_vllm/.venv-vllm.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from common import WORKLOADS, cpu_flags  # noqa: E402
from engine_protocol import ENGINES, load_engine_config, summarize  # noqa: E402

VLLM_VENV = Path(os.environ.get("VLLM_VENV", HERE / ".venv-vllm"))


class Worker:
    """A child process speaking common.py's line protocol."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log: IO[str] = log.open("w")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env,
            text=True, cwd=str(ROOT),
        )  # fmt: skip
        t0 = time.perf_counter()
        self.info = self._read()
        self.info["load_seconds"] = round(time.perf_counter() - t0, 1)

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@ "):
                msg: dict[str, Any] = json.loads(line[3:])
                if "error" in msg:
                    raise RuntimeError(f"{self.name}: {msg['error']}")
                return msg
            self.log.write(line)
        raise RuntimeError(f"{self.name} exited (code {self.proc.wait()}); see {self.log.name}")

    def ask(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def ensure_vllm_env() -> Path:
    py = VLLM_VENV / "bin" / "python"
    if not py.exists():
        print("building vLLM's CPU environment (setup_env.sh) ...", flush=True)
        subprocess.run(["bash", str(HERE / "setup_env.sh"), str(VLLM_VENV)], check=True)
    return py


def start(engine: str, a: argparse.Namespace, logs: Path) -> Worker:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if engine.startswith("vllm"):
        env.update(
            VLLM_CPU_KVCACHE_SPACE=str(a.kv_gib),
            VLLM_CPU_NUM_OF_RESERVED_CPU="0",
            VLLM_CPU_OMP_THREADS_BIND=f"0-{a.threads - 1}",
        )
        argv = [str(ensure_vllm_env()), str(HERE / "worker_vllm.py"), "--model", a.model]
        argv += ["--mode", engine.split("-", 1)[1]]
    else:
        argv = [sys.executable, str(HERE / "worker_augserve.py"), "--engine", engine]
        argv += ["--model", a.model, "--threads", str(a.threads), "--kv-gib", str(a.kv_gib)]
        if engine == "augserve":
            argv += ["--block-size", str(a.block_size)]
            argv += ["--max-batch-tokens", str(a.max_batch_tokens)]
            argv += ["--compile", a.augserve_compile]
    print(f"loading {engine} ...", flush=True)
    w = Worker(engine, argv, env, logs / f"{engine}.log")
    print(f"  {engine}: {w.info} ", flush=True)
    return w


def header(a: argparse.Namespace) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "commit": commit,
        "cpu": cpu_flags(),
        "threads": a.threads,
        "model": a.model,
        "dtype": "fp32",
    }


def run_all(
    workers: dict[str, Worker], a: argparse.Namespace, loads: list[float]
) -> dict[str, dict[str, list[Any]]]:
    """results[workload][engine] = list of replies, alternating engines, rotating order;
    `loads` gets the 1-minute load average at each repeat's start."""
    res: dict[str, dict[str, list[Any]]] = {w: {e: [] for e in workers} for w in a.workloads}
    names = list(workers)
    for rep in range(a.reps):
        loads.append(round(os.getloadavg()[0], 2))
        print(f"repeat {rep + 1} of {a.reps}, load {loads[-1]}", flush=True)
        for wl in a.workloads:
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for e in order:
                if e == "hf" and wl not in a.hf_workloads:
                    continue
                r = workers[e].ask({"workload": wl})
                res[wl][e].append(r)
                print(f"  rep {rep + 1} {wl:<8} {e:<14} {r['value']:8.2f} "
                      f"{WORKLOADS[wl].unit} ({r['seconds']:.1f} s)", flush=True)  # fmt: skip
    return res


def best(replies: list[dict[str, Any]], kind: str) -> float | None:
    vals = [r["value"] for r in replies]
    if not vals:
        return None
    return min(vals) if kind == "decode1" else max(vals)


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    pairs = [(x, y) for ra, rb in zip(a, b, strict=False) for x, y in zip(ra, rb, strict=False)]
    return sum(x == y for x, y in pairs) / max(1, len(pairs))


def report(res: dict[str, dict[str, list[Any]]], head: dict[str, Any]) -> dict[str, Any]:
    cpu = head["cpu"]
    print(f"\n{head['date']}  commit {head['commit']}  {cpu['model']} ({cpu['cores']} cores)")
    on = [k for k, v in cpu["flags"].items() if v]
    print(f"CPU flags: {' '.join(on)}; bf16={cpu['bf16']} amx={cpu['amx']}; "
          f"threads={head['threads']}; dtype=fp32")  # fmt: skip
    rows = {}
    engines = [e for e in ENGINES if any(e in res[w] for w in res)]
    print(f"\n{'workload':<40}" + "".join(f"{e:>15}" for e in engines)
          + f"{'vs vLLM best':>14}{'vs HF':>8}")  # fmt: skip
    for wl, per in res.items():
        w = WORKLOADS[wl]
        vals = {e: best(per.get(e, []), w.kind) for e in engines}
        vllm = [v for e, v in vals.items() if e.startswith("vllm") and v is not None]
        ours = vals.get("augserve")
        if w.kind == "decode1":  # lower is better: ratio = their time / ours
            r_v = min(vllm) / ours if vllm and ours else None
            r_h = vals["hf"] / ours if vals.get("hf") and ours else None
        else:
            r_v = ours / max(vllm) if vllm and ours else None
            r_h = ours / vals["hf"] if vals.get("hf") and ours else None
        cells = "".join(f"{v:>15.2f}" if v is not None else f"{'-':>15}" for v in vals.values())
        rv = f"{r_v:>13.2f}x" if r_v else f"{'-':>14}"
        rh = f"{r_h:>7.2f}x" if r_h else f"{'-':>8}"
        print(f"{w.label + ' (' + w.unit + ')':<40}{cells}{rv}{rh}")
        agree = {
            e: round(agreement(per["augserve"][0]["ids"], per[e][0]["ids"]), 3)
            for e in engines
            if e != "augserve" and per.get(e) and per.get("augserve")
        }
        rows[wl] = {"best": vals, "vs_vllm": r_v, "vs_hf": r_h, "greedy_agreement": agree}
    print("\ngreedy-id agreement with augserve (first 32 ids of 4 prompts): "
          + "; ".join(f"{wl}: {r['greedy_agreement']}" for wl, r in rows.items()))  # fmt: skip
    return rows


def apply_config(a: argparse.Namespace) -> dict[str, Any]:
    """Take every setting from the committed config; what the result records of it."""
    cfg, sha = load_engine_config(a.config)
    a.engines, a.workloads = ",".join(cfg.engines), ",".join(cfg.workloads)
    a.hf_workloads, a.reps, a.threads = ",".join(cfg.hf_workloads), cfg.repeats, cfg.threads
    a.kv_gib, a.block_size, a.max_batch_tokens = cfg.kv_gib, cfg.block_size, cfg.max_batch_tokens
    a.augserve_compile = {None: "auto", True: "on", False: "off"}[cfg.augserve_compile]
    a.model = str(ROOT / cfg.model)
    path = a.config.resolve()
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return {
        "config": str(rel),
        "config_sha256": sha,
        "repeats": cfg.repeats,
        "memory": {"augserve_kv_bytes": cfg.kv_gib << 30, "baseline_kv_bytes": cfg.kv_gib << 30},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--model", default=None, help="model dir (default: make-model --preset 100m --untied)"
    )
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--hf-workloads", default="b16", help="workloads HF runs (slow)")
    p.add_argument("--reps", type=int, default=2, help="alternating rounds; best is kept")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--kv-gib", type=int, default=2)
    p.add_argument("--block-size", type=int, default=16, help="augserve's KV block size")
    p.add_argument("--max-batch-tokens", type=int, default=4096, help="augserve's token budget")
    p.add_argument("--augserve-compile", choices=("on", "off", "auto"), default="on",
                   help="augserve's compile (auto: the engine's default, off on CPU)")  # fmt: skip
    p.add_argument("--config", type=Path, default=None,
                   help="a committed protocol config: its settings replace the flags")  # fmt: skip
    p.add_argument("--out", default=None, help="write all results as JSON here")
    a = p.parse_args()
    protocol = apply_config(a) if a.config else None
    a.workloads = [w for w in a.workloads.split(",") if w]
    a.hf_workloads = set(a.hf_workloads.split(","))
    for w in a.workloads:
        if w not in WORKLOADS:
            p.error(f"unknown workload {w!r} (choose from {', '.join(WORKLOADS)})")
    if a.model is None or a.model == str(ROOT / "runs" / "vs_vllm" / "llama-100m-untied"):
        # untied: a tied random model only repeats the last prompt token, so the
        # greedy-id agreement between engines would prove nothing
        a.model = str(ROOT / "runs" / "vs_vllm" / "llama-100m-untied")
        if not (Path(a.model) / "config.json").exists():
            from augserve.engine.make_model import make_model

            make_model("llama", "100m", a.model, untied=True)
    head = header(a)
    logs = Path(a.out).parent if a.out else ROOT / "runs" / "vs_vllm"
    logs.mkdir(parents=True, exist_ok=True)
    workers: dict[str, Worker] = {}
    loads: list[float] = []
    try:
        for e in a.engines.split(","):
            workers[e] = start(e, a, logs)
        res = run_all(workers, a, loads)
    finally:
        for w in workers.values():
            w.close()
    rows = report(res, head)
    if a.out:
        info = {e: w.info for e, w in workers.items()}
        blob = {"header": head, "engines": info, "summary": rows, "raw": res}
        if protocol is not None:
            kinds = {wl: WORKLOADS[wl].kind for wl in res}
            blob["protocol"] = {**protocol, "load": loads, "stats": summarize(res, kinds)}
        Path(a.out).write_text(json.dumps(blob, indent=1) + "\n")
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
