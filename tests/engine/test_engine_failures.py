"""A forward that raises aborts only its batch: its requests finish with reason "error"
and their KV is freed, a request outside the batch goes on, the next request succeeds,
and only failures in a row make the engine unhealthy."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from augserve import LLM, SamplingParams
from augserve.core.request import Segment
from augserve.engine.async_engine import AsyncLLMEngine
from augserve.engine.make_model import make_model
from augserve.engine.step_failures import FAILURES_UNHEALTHY, RequestFailed

GREEDY = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=8)
POISON = 999  # a prompt holding this token id makes the forward raise


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("fail") / "m", seed=6)


def poison_forward(llm: LLM) -> list[int]:
    """Make the runner raise on every forward whose batch holds a poisoned prompt."""
    runner = llm.engine.runner
    real = runner.execute
    failed: list[int] = []

    def execute(chunks: list[Any]) -> Any:
        if any(POISON in c.token_ids for c in chunks):
            failed.append(len(chunks))
            raise RuntimeError("injected forward failure")
        return real(chunks)

    runner.execute = execute  # type: ignore[method-assign]
    return failed


async def collect(aengine: AsyncLLMEngine, prompt: list[int], rid: str, **kw: Any) -> Any:
    outs = []
    try:
        async for out in aengine.generate(prompt, GREEDY, rid, **kw):
            outs.append(out)
    except RequestFailed as exc:
        return exc
    return outs[-1]


def test_a_failed_forward_aborts_only_its_batch(model_dir: Path) -> None:
    llm = LLM(model_dir, dtype="fp32", num_device_blocks=64, block_size=8)
    failed = poison_forward(llm)

    async def main() -> dict[str, Any]:
        aengine = AsyncLLMEngine(llm.engine)
        # a request paused in a call while the poisoned batch fails: not in it (the
        # call outlasts the failure by far, even on a loaded machine)
        plan = [Segment(2, call_time=5.0, return_len=3), Segment(4)]
        outside = asyncio.create_task(collect(aengine, [5, 6, 7], "outside", segments=plan))
        while not _in_call(llm, "outside"):
            await asyncio.sleep(0.01)
        bad = await collect(aengine, [5, POISON, 7], "bad")
        stats_after_failure = llm.engine.stats()
        healthy_after_one = aengine.healthy
        good = await collect(aengine, [5, 6, 8], "next")
        result = {"bad": bad, "good": good, "outside": await outside,
                  "stats": stats_after_failure, "healthy": healthy_after_one}  # fmt: skip
        await aengine.shutdown()
        return result

    out = asyncio.run(main())
    bad = out["bad"]
    assert isinstance(bad, RequestFailed) and "injected forward failure" in str(bad)
    assert bad.output is not None and bad.output.finish_reason == "error"
    assert failed == [1]  # the poisoned request was alone in its batch
    assert out["stats"].num_running == 0 and out["healthy"]
    assert out["good"].finish_reason == "length" and out["good"].num_generated_tokens == 8
    outside = out["outside"]
    assert outside.finished and outside.finish_reason != "error" and outside.num_calls == 1
    stats = llm.engine.stats()
    assert stats.device_blocks_used == 0 and not llm.engine.has_unfinished()


def _in_call(llm: LLM, rid: str) -> bool:
    req = llm.engine.get_request(rid)
    return req is not None and req.in_call


def test_failures_in_a_row_make_the_engine_unhealthy_until_a_step_succeeds(
    model_dir: Path,
) -> None:
    llm = LLM(model_dir, dtype="fp32", num_device_blocks=64, block_size=8)
    poison_forward(llm)

    async def main() -> tuple[list[bool], bool, Any]:
        aengine = AsyncLLMEngine(llm.engine)
        health = []
        for k in range(FAILURES_UNHEALTHY):
            assert isinstance(await collect(aengine, [POISON, 3], f"bad{k}"), RequestFailed)
            health.append(aengine.healthy)
        good = await collect(aengine, [4, 5, 6], "good")
        healed = aengine.healthy
        await aengine.shutdown()
        return health, healed, good

    health, healed, good = asyncio.run(main())
    assert health == [True] * (FAILURES_UNHEALTHY - 1) + [False]
    assert good.finish_reason == "length" and healed
    assert llm.engine.stats().device_blocks_used == 0


def test_a_failed_forward_leaves_nothing_in_the_prefix_cache(model_dir: Path) -> None:
    """Blocks are cached only once their KV is computed: a prompt whose forward raised
    must not be found later (its blocks hold garbage), while a computed one is."""
    llm = LLM(model_dir, dtype="fp32", num_device_blocks=64, block_size=8,
              enable_prefix_caching=True)  # fmt: skip
    runner, real = llm.engine.runner, llm.engine.runner.execute
    fail = [True]

    def execute(chunks: list[Any]) -> Any:
        if fail[0]:
            raise RuntimeError("injected forward failure")
        return real(chunks)

    runner.execute = execute  # type: ignore[method-assign]
    prompt = list(range(10, 50))  # 5 full blocks of 8

    async def main() -> list[Any]:
        aengine = AsyncLLMEngine(llm.engine)
        outs = [await collect(aengine, prompt, "failed")]
        fail[0] = False
        outs.append(await collect(aengine, prompt, "first"))
        outs.append(await collect(aengine, prompt, "again"))
        await aengine.shutdown()
        return outs

    failed, first, again = asyncio.run(main())
    assert isinstance(failed, RequestFailed)
    assert first.num_cached_tokens == 0  # nothing of the failed forward was cached
    assert again.num_cached_tokens == 32  # 4 full blocks: the last token is always computed
    assert llm.engine.stats().device_blocks_used == 0
