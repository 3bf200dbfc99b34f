"""Server-side scripted tool calls over vLLM's AsyncLLM with AugServeScheduler (vLLM's venv only).

    python vllm_tools_runner.py --model DIR

Three requests with the plan [[6, 0.2, 5], [4, 0.2, 5], [3, null, 0]] run at once
through `augserve.integrations.vllm_tools.generate_with_tools`: one pins Preserve,
one Discard (`augserve_context`), one leaves the choice to the policy. Prints one
line `@@ {json}`: each request's tokens per turn and its calls' durations. The
scheduler logs each pause's context policy (`decision_log`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from augserve.core.request import Segment
from augserve.integrations.plan import encode_plan

PLAN = [Segment(6, 0.2, 5), Segment(4, 0.2, 5), Segment(3)]


async def main_async(model: str, tp: int) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from augserve.integrations.vllm_tools import (
        ToolRun,
        generate_with_tools,
        plan_max_tokens,
        scripted_step,
    )

    args = AsyncEngineArgs(
        model=model, dtype="float32", enforce_eager=True, max_model_len=1024, seed=0,
        block_size=32, enable_prefix_caching=True, max_num_batched_tokens=128,
        num_gpu_blocks_override=36, tensor_parallel_size=tp,
        scheduler_cls="augserve.integrations.vllm.AugServeScheduler",
        additional_config={"augserve": {"decision_log": 100}},
    )  # fmt: skip
    llm = AsyncLLM.from_engine_args(args)
    runs: dict[str, ToolRun] = {}

    async def one(rid: str, hold: str | None) -> None:
        extra: dict[str, Any] = {"augserve_plan": encode_plan(PLAN)}
        if hold:
            extra["augserve_context"] = hold
        params = SamplingParams(temperature=0.0, ignore_eos=True, extra_args=extra)
        run = runs[rid] = ToolRun()
        prompt = [(7 * i + len(rid)) % 3000 + 3 for i in range(70)]
        step = scripted_step(PLAN, vocab=3000, seed=len(rid))
        gen = generate_with_tools(
            llm, prompt, params, rid, step, turn_max_tokens=plan_max_tokens(PLAN), run=run
        )
        async for _ in gen:
            pass

    try:
        await asyncio.wait_for(
            asyncio.gather(one("keep", "preserve"), one("drop", "discard"), one("choose", None)),
            timeout=600,
        )
    finally:
        llm.shutdown()
    return {
        rid: {"turns": [len(t) for t in r.turns], "calls": r.call_seconds, "done": r.finished}
        for rid, r in runs.items()
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--tp", type=int, default=1, help="tensor parallelism (GPU checks)")
    args = p.parse_args()
    out = asyncio.run(main_async(args.model, args.tp))
    sys.stdout.write("@@ " + json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
