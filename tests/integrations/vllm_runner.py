"""Runs vLLM with or without our scheduler class for tests/integrations (vLLM's venv only).

    python vllm_runner.py --model DIR --scheduler {default,path,class} [--policy NAME]

Prints one line `@@ {json}`. Every run: a small offline greedy workload through
`LLM.generate` (output ids of every request). `path` loads our class by its
dotted name in vLLM's default multiprocess mode; `default` (vLLM's own
scheduler) and `class` (our class object) run in-process
(VLLM_ENABLE_V1_MULTIPROCESSING=0), and `class` then drives the EngineCore
step by step: a crafted batch under a tight budget, a resubmitted turn
(Discard with reuse), a session's turn held through its call and a resumable
streaming session (Preserve), then an overloaded batch, reporting
the scheduler's decisions, its mirrors and what its online predictor
learned; `class --policy augserve-slo` runs only the overloaded batch, under the
admission gate. One engine config for all: a
128-token budget and 36 KV blocks of 32 tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from typing import Any

PATH = "augserve.integrations.vllm.AugServeScheduler"
BLOCK = 32


def greedy_prompts() -> list[tuple[list[int], int]]:
    rng = random.Random(7)
    lens = [300, 12, 90, 45, 200, 7, 130, 60]
    outs = [24, 40, 8, 16, 12, 32, 20, 28]
    return [
        ([rng.randrange(3, 4000) for _ in range(n)], m) for n, m in zip(lens, outs, strict=True)
    ]


def make_llm(args: argparse.Namespace, **kw: Any) -> Any:
    from vllm import LLM

    if args.scheduler == "path":
        kw["scheduler_cls"] = PATH
    elif args.scheduler == "class":
        from augserve.integrations.vllm import AugServeScheduler

        kw["scheduler_cls"] = AugServeScheduler
    return LLM(
        model=args.model, dtype="float32", enforce_eager=True, max_model_len=1024, seed=0,
        block_size=BLOCK, enable_prefix_caching=True, max_num_batched_tokens=128,
        num_gpu_blocks_override=36, tensor_parallel_size=args.tp, **kw,
    )  # fmt: skip


def greedy(llm: Any) -> list[list[int]]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    work = greedy_prompts()
    prompts = [TokensPrompt(prompt_token_ids=ids) for ids, _ in work]
    params = [SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True) for _, m in work]
    outs = llm.generate(prompts, params, use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


class Driver:
    """Submits requests straight to the in-process EngineCore and steps it."""

    def __init__(self, llm: Any) -> None:
        self.engine = llm.llm_engine
        self.core = self.engine.engine_core.engine_core
        self.sched = self.core.scheduler
        self.tokens: dict[str, list[int]] = {}
        self.finished: list[str] = []

    def submit(self, rid: str, ids: list[int], max_tokens: int, **kw: Any) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        extra = kw.pop("extra", None)
        sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True,
                            extra_args=extra)  # fmt: skip
        req = self.engine.input_processor.process_inputs(
            rid, TokensPrompt(prompt_token_ids=ids), sp,
            supported_tasks=self.engine.get_supported_tasks(), **kw,
        )  # fmt: skip
        self.engine.engine_core.add_request(req)

    def step(self) -> None:
        outputs, _ = self.core.step()
        for eco in outputs.values():
            for o in eco.outputs:
                self.tokens.setdefault(o.request_id, []).extend(o.new_token_ids)
                if o.finish_reason is not None:
                    self.finished.append(o.request_id)

    def run(self, max_steps: int = 2000) -> None:
        for _ in range(max_steps):
            if not self.sched.has_requests():
                return
            self.step()
        raise RuntimeError("engine did not drain")

    def run_until_paused(self, rid: str, max_steps: int = 500) -> None:
        from vllm.v1.request import RequestStatus

        for _ in range(max_steps):
            req = self.sched.requests[rid]
            if req.status == RequestStatus.WAITING_FOR_STREAMING_REQ:
                return
            self.step()
        raise RuntimeError(f"{rid} never paused")


def mirror_info(sched: Any, rid: str) -> dict[str, Any] | None:
    m = sched.augserve.mirror(rid)
    if m is None:
        return None
    return {
        "segment_index": m.segment_index,
        "num_tokens": m.num_tokens,
        "calls": [[c.returned_tokens, c.policy.value if c.policy else None] for c in m.calls],
        "cost": sched.augserve.cost(rid),
        "in_call": m.in_call,
    }


def crafted(d: Driver, rng: random.Random) -> dict[str, Any]:
    """Four requests at once under a 128-token budget, then one that fills the cache."""
    batch = {"a": (400, 30), "b": (30, 4), "c": (150, 10), "d": (60, 6)}
    costs = {}
    for rid, (n, m) in batch.items():
        d.submit(rid, [rng.randrange(3, 4000) for _ in range(n)], m)
        costs[rid] = d.sched.augserve.cost(rid)
    start = len(d.sched.augserve.decisions)
    d.run()
    d.submit("fill", [rng.randrange(3, 4000) for _ in range(1015)], 4)
    d.run()
    decisions = list(d.sched.augserve.decisions)[start:]
    return {"costs": costs, "finished": list(d.finished), "decisions": decisions}


def resubmitted(d: Driver, rng: random.Random, reset: bool) -> dict[str, Any]:
    """A turn ends at its call; the client resubmits context + 5 returned tokens."""
    tag = "reset" if reset else "kept"
    ids = [rng.randrange(3, 4000) for _ in range(100)]
    extra = {"augserve_session": f"s-{tag}", "augserve_plan": "[[6, 1.0, 5], [4, null, 0]]"}
    d.submit(f"t0-{tag}", ids, 6, extra=extra)
    d.run()
    if reset:
        assert d.core.reset_prefix_cache()
    ctx = ids + d.tokens[f"t0-{tag}"] + [rng.randrange(3, 4000) for _ in range(5)]
    extra2 = {"augserve_session": f"s-{tag}", "augserve_plan": "[[4, null, 0]]"}
    d.submit(f"t1-{tag}", ctx, 4, extra=extra2)
    info = mirror_info(d.sched, f"t1-{tag}")
    d.run()
    return {"mirror": info, "answered": len(d.tokens.get(f"t1-{tag}", []))}


def streamed(d: Driver, rng: random.Random, hold: str) -> dict[str, Any]:
    """A resumable session: turn 1, pause (KV held or released: `hold`), 7 returned
    tokens, turn 2."""
    rid = f"st-{hold}"
    extra = {"augserve_plan": "[[5, 2.0, 7], [3, null, 0]]", "augserve_context": hold}
    pool = d.sched.kv_cache_manager.block_pool
    before = pool.get_num_free_blocks()
    d.submit(rid, [rng.randrange(3, 4000) for _ in range(80)], 5, resumable=True, extra=extra)
    d.run_until_paused(rid)
    paused = {"free": pool.get_num_free_blocks(), "mirror": mirror_info(d.sched, rid)}
    paused["computed"] = d.sched.requests[rid].num_computed_tokens
    d.submit(rid, [rng.randrange(3, 4000) for _ in range(7)], 3, resumable=True)
    resumed = {"free": pool.get_num_free_blocks(), "mirror": mirror_info(d.sched, rid)}
    d.run_until_paused(rid)
    d.sched.finish_requests(rid, _aborted())
    after = pool.get_num_free_blocks()
    return {
        "before": before, "paused": paused, "resumed": resumed, "free_after": after,
        "tokens": d.tokens[rid],
    }  # fmt: skip


def held(d: Driver, rng: random.Random) -> dict[str, Any]:
    """A session's turn ends with `augserve_context: preserve`: its blocks stay held (out
    of the free count) until its resubmission is scheduled; a second held turn is freed
    by a request that needs its blocks."""
    pool = d.sched.kv_cache_manager.block_pool
    ids = [rng.randrange(3, 4000) for _ in range(100)]
    extra = {"augserve_session": "s-held", "augserve_context": "preserve"}
    before = pool.get_num_free_blocks()
    d.submit("h0", ids, 6, extra=extra)
    d.run()
    holding = {"holds": len(d.sched._holds), "blocks": d.sched._holds.blocks(),
               "free": pool.get_num_free_blocks()}  # fmt: skip
    ctx = ids + d.tokens["h0"] + [rng.randrange(3, 4000) for _ in range(5)]
    d.submit("h1", ctx, 4, extra={"augserve_session": "s-held"})
    info = mirror_info(d.sched, "h1")
    d.run()
    after = {"holds": len(d.sched._holds), "free": pool.get_num_free_blocks()}
    d.submit("p0", [rng.randrange(3, 4000) for _ in range(200)], 4,
             extra={"augserve_session": "s-press", "augserve_context": "preserve"})  # fmt: skip
    d.run()
    pressed = {"holds": len(d.sched._holds)}
    d.submit("fill2", [rng.randrange(3, 4000) for _ in range(1015)], 4)
    d.run()
    pressed.update(holds_after=len(d.sched._holds), counts=dict(d.sched._holds.counts),
                   answered=len(d.tokens.get("fill2", [])))  # fmt: skip
    return {
        "before": before, "holding": holding, "mirror": info, "after": after,
        "answered": len(d.tokens.get("h1", [])), "pressed": pressed,
    }  # fmt: skip


def overloaded(d: Driver, rng: random.Random) -> dict[str, Any]:
    """Six 150-token requests at once, each to generate 100 tokens: 30 blocks of prompts
    grow to 48 in a cache of 35; preemptions counted step by step."""
    ids = [f"ov{i}" for i in range(6)]
    plan = {"augserve_plan": "[[100, null, 0]]"}  # read by the oracle runs only
    for rid in ids:
        d.submit(rid, [rng.randrange(3, 4000) for _ in range(150)], 100, extra=plan)
    preempted: dict[str, int] = {}
    for _ in range(3000):
        if not d.sched.has_requests():
            break
        d.step()
        for r in [*d.sched.running, *d.sched.waiting]:
            preempted[r.request_id] = max(preempted.get(r.request_id, 0), r.num_preemptions)
    return {
        "tokens": [len(d.tokens.get(rid, [])) for rid in ids],
        "preemptions": sum(preempted.get(rid, 0) for rid in ids),
        "gated_steps": d.sched.augserve.counts["gated_steps"],
    }


def _aborted() -> Any:
    from vllm.v1.request import RequestStatus

    return RequestStatus.FINISHED_ABORTED


def drive(llm: Any) -> dict[str, Any]:
    d = Driver(llm)
    rng = random.Random(11)
    out: dict[str, Any] = {
        "scheduler": type(d.sched).__name__,
        "static_budget": d.sched.augserve.facts.max_batch_tokens,
        "block_size": d.sched.block_size,
        "num_blocks": d.sched.augserve.facts.num_blocks,
    }
    out["crafted"] = crafted(d, rng)
    out["kept"] = resubmitted(d, rng, reset=False)
    out["reset"] = resubmitted(d, rng, reset=True)
    out["stream"] = streamed(d, rng, "preserve")
    out["stream_discard"] = streamed(d, rng, "discard")
    out["unplanned"] = unplanned(d, rng)
    out["sessions_left"] = d.sched.augserve.num_sessions()
    out["learned"] = dict(d.sched.augserve.predictions.counts)
    out["predictor"] = d.sched.augserve.predictor.name
    out["held"] = held(d, rng)  # last: what was learned before it is counted above
    out["overloaded"] = overloaded(d, rng)
    return out


def unplanned(d: Driver, rng: random.Random) -> dict[str, Any]:
    """A request without a plan and a large max_tokens, after the online predictor has
    learned from every request before it: its predicted output."""
    d.submit("unplanned", [rng.randrange(3, 4000) for _ in range(40)], 300)
    m = d.sched.augserve.mirror("unplanned")
    info = {"pred_output_len": m.pred_output_len, "segments": len(m.segments)}
    d.core.abort_requests(["unplanned"])
    return info


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--scheduler", choices=("default", "path", "class"), required=True)
    p.add_argument("--tp", type=int, default=1, help="tensor parallelism (GPU checks)")
    p.add_argument("--policy", default=None, help="with class: only the overloaded batch")
    p.add_argument("--options", default="{}", help="more augserve options (JSON)")
    args = p.parse_args()
    if args.scheduler != "path":
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    options: dict[str, Any] = {"decision_log": 10_000}
    if args.policy:
        options.update(policy=args.policy, **json.loads(args.options))
    llm = make_llm(args, additional_config={"augserve": options})
    result: dict[str, Any] = {
        "outputs": greedy(llm),
        "expected_lengths": [m for _, m in greedy_prompts()],
    }
    if args.scheduler == "class" and args.policy:
        result["overloaded"] = overloaded(Driver(llm), random.Random(11))
    elif args.scheduler == "class":
        result.update(drive(llm))
    sys.stdout.write("@@ " + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
