"""Server-side calls over vLLM (AugServeScheduler in AsyncLLM) vs vLLM with client-side calls.

    $VLLM_VENV/bin/python benchmarks/vs_vllm/bench_vllm_tools.py --model DIR \\
        --rates 1 2 --duration 30 --reps 1 --out runs/vllm_tools/results.json

The tool workload (`tool_workload.py`) replayed in-process through vLLM's
`AsyncLLM`, each configuration in its own child process (vLLM's engine owns
process-wide state), the same workload draw for both, alternating which goes first:

- `vllm`: vLLM's default scheduler; each call ends the request, the client sleeps
  the call's duration and resubmits context + result as a new request in the same
  `session_id` (prefix caching on): how users run vLLM with tools today;
- `vllm+augserve-tools`: `--scheduler-cls AugServeScheduler` (online predictor, no
  plan sent) and each request is one resumable streaming session
  (`augserve.integrations.vllm_tools`): the call runs beside the engine while the
  session waits inside vLLM, its KV held or released by our policy's choice.

Both get the same KV blocks (`--kv-blocks`), `max_num_batched_tokens`, fp32, eager.
One absolute SLO for both from vLLM's batch-1 decode iteration, timed in the first
child. Not the HTTP path (no `augserve serve --engine vllm` yet): both sides skip
the OpenAI server alike.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import cpu_flags  # noqa: E402
from tool_workload import (  # noqa: E402
    Scale,
    ToolRequest,
    _record,
    build_workload,
    slo_from_iteration,
    summarize,
)

from augserve.bench.report import git_commit  # noqa: E402
from augserve.core.request import CallRecord, RequestStatus  # noqa: E402

PLUGIN = "augserve.integrations.vllm.AugServeScheduler"
CONFIGS = ("vllm", "vllm+augserve-tools")


def engine(args: argparse.Namespace, plugin: bool) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    extra: dict[str, Any] = {}
    if plugin:
        extra = {
            "scheduler_cls": PLUGIN,
            "additional_config": {"augserve": {"profile": args.profile}},
        }
    return AsyncLLM.from_engine_args(
        AsyncEngineArgs(
            model=args.model,
            dtype="float32",
            enforce_eager=True,
            max_model_len=2048,
            seed=0,
            enable_prefix_caching=True,
            num_gpu_blocks_override=args.kv_blocks,
            max_num_batched_tokens=args.batch_tokens,
            **extra,
        )  # fmt: skip
    )


async def decode_iteration(llm: Any) -> float:
    """Seconds per output token at batch 1 (best of 3 streamed runs of 64 tokens)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    best = float("inf")
    for i in range(3):
        sp = SamplingParams(max_tokens=64, ignore_eos=True, temperature=0.0,
                            output_kind=RequestOutputKind.DELTA)  # fmt: skip
        stamps = []
        async for _ in llm.generate(TokensPrompt(prompt_token_ids=[3 + i] * 32), sp, f"t{i}"):
            stamps.append(time.monotonic())
        if len(stamps) > 2:
            best = min(best, (stamps[-1] - stamps[0]) / (len(stamps) - 1))
    return best


async def client_side(llm: Any, req: ToolRequest, t0: float, rec: dict[str, Any]) -> None:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    ctx = list(req.prompt_ids)
    for k, seg in enumerate(req.segments):
        sp = SamplingParams(max_tokens=seg.output_len, ignore_eos=True, temperature=0.0,
                            output_kind=RequestOutputKind.DELTA)  # fmt: skip
        prompt = TokensPrompt(prompt_token_ids=ctx)
        async for out in llm.generate(
            prompt, sp, f"{req.request_id}-{k}", session_id=req.request_id
        ):
            toks = list(out.outputs[0].token_ids)
            if toks and rec["first"] is None:
                rec["first"] = time.monotonic() - t0
            rec["generated"] += len(toks)
            ctx += toks
        rec["finish"] = time.monotonic() - t0
        if seg.has_call and k + 1 < len(req.segments):
            start = time.monotonic()
            await asyncio.sleep(seg.call_time or 0.0)
            ctx += req.returned_ids[k]
            rec["calls"].append([start - t0, time.monotonic() - t0, len(req.returned_ids[k])])


async def server_side(llm: Any, req: ToolRequest, t0: float, rec: dict[str, Any]) -> None:
    from vllm import SamplingParams

    from augserve.integrations.vllm_tools import generate_with_tools, plan_max_tokens

    async def step(turn: int, _tokens: list[int]) -> list[int] | None:
        if turn + 1 >= len(req.segments) or not req.segments[turn].has_call:
            return None
        start = time.monotonic()
        await asyncio.sleep(req.segments[turn].call_time or 0.0)
        ret = list(req.returned_ids[turn])
        rec["calls"].append([start - t0, time.monotonic() - t0, len(ret)])
        return ret

    sp = SamplingParams(ignore_eos=True, temperature=0.0)
    plan = list(req.segments)
    limits = plan_max_tokens(plan)
    gen = generate_with_tools(
        llm, req.prompt_ids, sp, req.request_id, step, turn_max_tokens=limits,
        session_id=req.request_id,
    )  # fmt: skip
    async for out in gen:
        toks = out.outputs[0].token_ids if out.outputs else []
        if toks and rec["first"] is None:
            rec["first"] = time.monotonic() - t0
        rec["generated"] += len(toks)
        rec["finish"] = time.monotonic() - t0


async def child_async(args: argparse.Namespace) -> dict[str, Any]:
    plugin = args.config != "vllm"
    llm = engine(args, plugin)
    try:
        iteration = await decode_iteration(llm)
        vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
        scale = Scale(length=args.length_scale, time=args.time_scale)
        work = build_workload(args.rate, args.duration, args.seed, scale, vocab)
        recs = {r.request_id: {"first": None, "finish": None, "generated": 0, "calls": [],
                               "done": False} for r in work}  # fmt: skip
        run = server_side if plugin else client_side
        t0 = time.monotonic()

        async def one(req: ToolRequest) -> None:
            await asyncio.sleep(max(0.0, t0 + req.arrival - time.monotonic()))
            await run(llm, req, t0, recs[req.request_id])
            recs[req.request_id]["done"] = True

        tasks = [asyncio.create_task(one(r)) for r in work]
        _, pending = await asyncio.wait(tasks, timeout=args.duration + args.drain)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        errors = [repr(t.exception()) for t in tasks if t.done() and not t.cancelled()
                  and t.exception() is not None]  # fmt: skip
        return {"iteration_s": iteration, "records": recs, "errors": errors[:3]}
    finally:
        llm.shutdown()


def metrics(args: argparse.Namespace, seed: int, recs: dict[str, Any], slo: Any) -> dict[str, Any]:
    vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
    scale = Scale(length=args.length_scale, time=args.time_scale)
    out = []
    for req in build_workload(args.rate, args.duration, seed, scale, vocab):
        rec, r = _record(req), recs[req.request_id]
        rec.first_token_time, rec.num_generated_tokens = r["first"], r["generated"]
        rec.calls = [CallRecord(s, e, n) for s, e, n in r["calls"]]
        if r["done"]:
            rec.status, rec.finish_time = RequestStatus.FINISHED_STOPPED, r["finish"]
        out.append(rec)
    return summarize(out, slo, args.duration + args.drain).to_dict()


def run_child(args: argparse.Namespace, config: str, rate: float, seed: int) -> dict[str, Any]:
    argv = [sys.executable, __file__, *sys.argv[1:], "--child", "--config", config,
            "--rate", str(rate), "--seed", str(seed)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@ ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"{config} at rate {rate} failed:\n{(proc.stdout + proc.stderr)[-3000:]}"
        )
    return dict(json.loads(lines[-1][3:]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--rates", type=float, nargs="+", default=[1.0, 2.0])
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--drain", type=float, default=60.0)
    p.add_argument("--length-scale", type=float, default=0.25)
    p.add_argument("--time-scale", type=float, default=0.1)
    p.add_argument("--kv-blocks", type=int, default=64)
    p.add_argument("--batch-tokens", type=int, default=512)
    p.add_argument("--profile", default="opt-13b-h800")
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--out", default="runs/vllm_tools/results.json")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", choices=CONFIGS, help=argparse.SUPPRESS)
    p.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0)
    args, _ = p.parse_known_args()
    if args.child:
        sys.stdout.write("@@ " + json.dumps(asyncio.run(child_async(args))) + "\n")
        return
    rows: list[dict[str, Any]] = []
    slo = None
    for rep in range(args.reps):
        for i, rate in enumerate(args.rates):
            seed = 100 * rep + i
            order = CONFIGS if (rep + i) % 2 == 0 else CONFIGS[::-1]
            for config in order:
                load = os.getloadavg()
                res = run_child(args, config, rate, seed)
                if slo is None:
                    slo = slo_from_iteration(res["iteration_s"])
                args.rate = rate
                m = metrics(args, seed, res["records"], slo)
                rows.append({"rate": rate, "rep": rep, "config": config, "load_avg": load,
                             "iteration_s": res["iteration_s"], "metrics": m,
                             "errors": res["errors"]})  # fmt: skip
                print(f"rate {rate:g} rep {rep} {config}: goodput {m['goodput']:.3f}, attainment "
                      f"{m['slo_attainment']:.0%}, finished {m['num_finished']}/{m['num_requests']}"
                      f", load {load[0]:.1f}", flush=True)  # fmt: skip
    assert slo is not None
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "command": " ".join([sys.executable, *sys.argv]), "commit": git_commit(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu": cpu_flags(), "busy_machine": "shared by 8 engineers: see load_avg per row",
        "slo": {"ttft_s": slo.ttft_slo, "norm_latency_s_per_token": slo.norm_latency_slo},
        "kv_blocks": args.kv_blocks, "batch_tokens": args.batch_tokens, "rows": rows,
    }, indent=2))  # fmt: skip
    print(f"written to {out}")


if __name__ == "__main__":
    main()
