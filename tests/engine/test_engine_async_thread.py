"""AsyncLLMEngine runs each step in a worker thread: the event loop stays free during
a step, and arrivals and aborts that come in meanwhile wait for the step's end."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from augserve import LLM, SamplingParams
from augserve.engine.async_engine import AsyncLLMEngine
from augserve.engine.make_model import make_model

GREEDY = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=6)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("thread") / "m", seed=3)


class SlowSteps:
    """Wraps `engine.step`: a step first waits up to `wait` seconds for the event loop
    to tick (`tick`, set by a coroutine) and records whether it did, then waits for
    `release`; it also records the thread it ran on and whether two ever overlapped."""

    def __init__(self, engine: Any, wait: float = 0.0) -> None:
        self.step, self.threads, self.active, self.overlap = engine.step, set(), 0, False
        self.wait, self.ticked = wait, []
        self.tick = threading.Event()  # set by the loop: it ran while this step waited
        self.running = threading.Event()  # set while a step runs
        self.release = threading.Event()  # a step runs on only once this is set
        self.release.set()
        self.lock = threading.Lock()
        engine.step = self

    def __call__(self) -> Any:
        with self.lock:
            self.active += 1
            self.overlap |= self.active > 1
            self.threads.add(threading.get_ident())
        self.running.set()
        try:
            if self.wait:
                self.tick.clear()
                self.ticked.append(self.tick.wait(self.wait))
            assert self.release.wait(60), "the test never released the step"
            return self.step()
        finally:
            self.running.clear()
            with self.lock:
                self.active -= 1


@pytest.mark.parametrize("in_thread", [True, False])
def test_the_loop_is_free_during_a_step_only_with_steps_in_a_thread(
    model_dir: Path, in_thread: bool
) -> None:
    llm = LLM(model_dir, dtype="fp32", num_device_blocks=64, block_size=8)
    # in a thread, each step waits (up to a minute) for the loop to tick; on the loop,
    # the loop cannot tick while the step waits, so the short wait always runs out
    slow = SlowSteps(llm.engine, wait=60.0 if in_thread else 0.02)

    async def main() -> list[Any]:
        aengine = AsyncLLMEngine(llm.engine, step_in_thread=in_thread)
        done = asyncio.Event()

        async def ticker() -> None:
            while not done.is_set():
                await asyncio.sleep(0.001)
                slow.tick.set()

        async def consume() -> list[Any]:
            outs = [o async for o in aengine.generate("A quick brown fox", GREEDY, "r0")]
            done.set()
            return outs

        _, outs = await asyncio.gather(ticker(), consume())
        await aengine.shutdown()
        return outs

    outs = asyncio.run(main())
    assert outs[-1].finished and outs[-1].outputs[0].token_ids
    assert len(slow.ticked) >= len(outs)  # a step for each output at least
    if in_thread:  # the loop ticked during every step
        assert all(slow.ticked)
        assert threading.get_ident() not in slow.threads
    else:  # ...during none
        assert not any(slow.ticked)
        assert slow.threads == {threading.get_ident()}
    assert not slow.overlap


def test_arrivals_and_aborts_during_a_step_apply_after_it(model_dir: Path) -> None:
    llm = LLM(model_dir, dtype="fp32", num_device_blocks=64, block_size=8)
    slow = SlowSteps(llm.engine)
    offline = llm.generate(["The sun rises", "A quick brown fox"], GREEDY)

    async def main() -> tuple[list[Any], list[Any], Any]:
        aengine = AsyncLLMEngine(llm.engine)
        first: list[Any] = []

        async def consume(prompt: str, rid: str, sink: list[Any]) -> None:
            async for out in aengine.generate(prompt, GREEDY, rid):
                sink.append(out)

        slow.release.clear()  # the first step waits until b and c came and c left
        t1 = asyncio.create_task(consume("The sun rises", "a", first))
        assert await asyncio.to_thread(slow.running.wait, 60)  # the first step is running
        second: list[Any] = []
        t2 = asyncio.create_task(consume("A quick brown fox", "b", second))
        doomed: list[Any] = []
        t3 = asyncio.create_task(consume("Gone before it starts", "c", doomed))
        for _ in range(5):
            await asyncio.sleep(0)  # b and c arrive
        t3.cancel()  # aborted while a step runs
        for _ in range(5):
            await asyncio.sleep(0)
        assert slow.running.is_set()  # still the first step
        slow.release.set()
        await asyncio.gather(t1, t2, return_exceptions=True)
        await aengine.shutdown()
        return first, second, llm.engine.stats()

    first, second, stats = asyncio.run(main())
    assert first[-1].outputs[0].token_ids == offline[0].outputs[0].token_ids
    assert second[-1].outputs[0].token_ids == offline[1].outputs[0].token_ids
    assert not slow.overlap
    assert stats.num_waiting == 0 and stats.num_running == 0 and stats.device_blocks_used == 0
    assert llm.engine.get_request("c") is None


def test_steps_run_back_to_back_in_the_thread_and_still_stream_each_token(
    model_dir: Path,
) -> None:
    """With nothing new to apply, the thread does not hand back to the loop between
    steps: one request of 12 tokens is one or two thread hops, not 12, and its stream
    still gets every token as its own output, in order, equal to offline decoding."""
    llm = LLM(model_dir, dtype="fp32", num_device_blocks=64, block_size=8)
    params = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=12)
    offline = llm.generate(["The sun rises"], params)[0].outputs[0].token_ids
    slow = SlowSteps(llm.engine)

    async def main() -> tuple[list[Any], int]:
        aengine = AsyncLLMEngine(llm.engine)
        hops = 0
        run = aengine.thread.run

        async def counted(fn: Any) -> Any:
            nonlocal hops
            hops += 1
            return await run(fn)

        aengine.thread.run = counted  # type: ignore[method-assign]
        outs = [o async for o in aengine.generate("The sun rises", params, "r0")]
        await aengine.shutdown()
        return outs, hops

    outs, hops = asyncio.run(main())
    lengths = [len(o.outputs[0].token_ids) for o in outs]
    assert lengths == list(range(1, 13))  # one output per token, in order
    assert outs[-1].outputs[0].token_ids == offline
    assert len(slow.ticked) == 0 and len(slow.threads) == 1  # (no waits asked)
    assert hops <= 2 < len(outs)
    assert not slow.overlap
