"""AsyncLLMEngine: streaming, model-driven tool calls off the loop, abort."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from augserve import LLM, SamplingParams
from augserve.core.request import Segment
from augserve.engine.async_engine import AsyncLLMEngine
from augserve.engine.make_model import make_model
from augserve.engine.tools import ParsedCall

GREEDY = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=12)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("async") / "m", seed=6)


class EveryNChars:
    """Says the model called `calc` once a segment has `n` characters (at most `limit` calls)."""

    def __init__(self, n: int, limit: int) -> None:
        self.n, self.limit, self.calls = n, limit, 0

    def parse(self, text: str, segment_start: int) -> ParsedCall | None:
        if self.calls < self.limit and len(text) - segment_start >= self.n:
            self.calls += 1
            return ParsedCall("calc", {"expr": "6*7"}, raw=text[segment_start:])
        return None


class SlowCalc:
    def __init__(self) -> None:
        self.seen: list[ParsedCall] = []

    async def __call__(self, call: ParsedCall) -> str:
        self.seen.append(call)
        await asyncio.sleep(0.3)
        return " = 42"


def test_streams_match_offline_and_calls_run_concurrently(model_dir: Path) -> None:
    llm = LLM(model_dir, dtype="fp32", num_device_blocks=64, block_size=8)
    plan = [Segment(4, call_time=0.3, return_len=3), Segment(5)]
    offline = llm.generate(["A quick", "The sun rises"], GREEDY)

    async def main() -> tuple[list[list], list]:
        aengine = AsyncLLMEngine(llm.engine)
        streams: list[list] = [[], [], []]

        async def consume(k: int, prompt: str, segments: list[Segment] | None) -> None:
            async for out in aengine.generate(prompt, GREEDY, f"a{k}", segments):
                streams[k].append(out)
                arrivals[k].append(time.monotonic())

        await asyncio.gather(
            consume(0, "A quick", None),
            consume(1, "The sun rises", None),
            consume(2, "What is", plan),
        )
        await aengine.shutdown()
        return streams, []

    arrivals: list[list[float]] = [[], [], []]
    streams, _ = asyncio.run(main())
    for k in (0, 1):
        final = streams[k][-1]
        assert final.finished and final.token_ids == offline[k].token_ids
        assert "".join(o.delta_text for o in streams[k]) == final.text == offline[k].text
        assert sum(len(o.new_token_ids) for o in streams[k]) == len(final.token_ids)
    scripted = streams[2][-1].request
    assert scripted is not None and len(scripted.calls) == 1
    call = scripted.calls[0]
    # the other requests kept decoding while the call was out: tokens of theirs arrived
    # inside the call's window (an event count, not a bound on how long decoding takes)
    during = [t for k in (0, 1) for t in arrivals[k] if call.start < t < call.end]
    assert during, (call.start, call.end, arrivals[:2])


def test_model_driven_tool_calls(model_dir: Path) -> None:
    parser, calc = EveryNChars(8, limit=1), SlowCalc()
    llm = LLM(
        model_dir,
        dtype="fp32",
        num_device_blocks=64,
        block_size=8,
        tool_parser=parser,
        tool_executor=calc,
    )
    out = llm.generate(
        "Please compute", SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=10)
    )[0]
    assert len(calc.seen) == 1 and out.num_calls == 1
    returned = llm.tokenizer.encode(" = 42", add_special_tokens=False)
    ids = out.token_ids
    k = next(i for i in range(len(ids)) if ids[i : i + len(returned)] == returned)
    assert out.num_generated_tokens == 10 and len(ids) == 10 + len(returned)
    assert " = 42" in out.text and k > 0
    assert out.request is not None and out.request.calls[0].end - out.request.calls[0].start >= 0.29


def test_leaving_the_stream_aborts(model_dir: Path) -> None:
    llm = LLM(model_dir, dtype="fp32", num_device_blocks=64, block_size=8)

    async def main() -> None:
        aengine = AsyncLLMEngine(llm.engine)
        plan = [Segment(2, call_time=5.0, return_len=3), Segment(5)]
        gen = aengine.generate("Hello", GREEDY, "x", plan)
        async for out in gen:
            if out.request is not None and out.request.in_call:
                break
        await gen.aclose()
        await asyncio.sleep(0.05)
        await aengine.shutdown()

    asyncio.run(main())
    stats = llm.engine.stats()
    assert not llm.engine.has_unfinished() and not llm.engine.num_in_calls()
    assert stats.device_blocks_used == 0 and sum(stats.num_paused.values()) == 0


def test_abort_of_the_last_live_request_reports_its_final_output(model_dir: Path) -> None:
    llm = LLM(model_dir, dtype="fp32", num_device_blocks=64, block_size=8)

    async def main() -> list[object]:
        aengine = AsyncLLMEngine(llm.engine)
        outs: list[object] = []

        async def consume() -> None:
            params = SamplingParams(max_tokens=400, ignore_eos=True)
            async for o in aengine.generate([5, 6, 7], params, "r1"):
                outs.append(o)

        task = asyncio.create_task(consume())
        while len(outs) < 3:
            await asyncio.sleep(0.01)
        assert aengine.abort("r1")
        await asyncio.wait_for(task, 5.0)  # the stream ends with the abort, not a hang
        await aengine.shutdown()
        return outs

    outs = asyncio.run(main())
    assert outs[-1].finished and outs[-1].finish_reason == "abort"  # type: ignore[attr-defined]
    assert llm.engine.stats().device_blocks_used == 0


def test_a_prompt_too_long_for_the_cache_finishes_with_an_error(model_dir: Path) -> None:
    llm = LLM(model_dir, dtype="fp32", num_device_blocks=4, block_size=8)  # 32 tokens of KV
    [out] = llm.generate([list(range(3, 60))], SamplingParams(max_tokens=4))
    assert out.finished and out.finish_reason == "error" and out.token_ids == []
