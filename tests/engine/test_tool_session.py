"""Per-request tool sessions on the async engine: the real parse -> pause -> run -> resume path.

Random weights never emit a call, so a scripted sampler forces the tokens: each
request is tagged by its sampling seed and gets a fixed list of token ids.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from augserve.core.prediction import Prediction
from augserve.core.request import Request
from augserve.engine.async_engine import AsyncLLMEngine
from augserve.engine.builder import EngineArgs, build_engine
from augserve.engine.engine import LLMEngine
from augserve.engine.make_model import make_model
from augserve.engine.outputs import RequestOutput
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tools import ParsedCall, ToolSession

CALL = re.compile(r"CALL (\w+) (\{.*?\}) END")


class Parser:
    def parse(self, text: str, segment_start: int) -> ParsedCall | None:
        m = CALL.search(text, segment_start)
        return ParsedCall(m.group(1), json.loads(m.group(2)), m.group(0)) if m else None


class ScriptedSampler:
    """Emits `scripts[seed]` token by token (then token 5 forever)."""

    def __init__(self, scripts: dict[int, list[int]]) -> None:
        self.scripts = scripts
        self.pos: dict[int, int] = {}

    def __call__(
        self, logits: torch.Tensor, params: list[SamplingParams], positions: Any
    ) -> list[int]:
        out = []
        for p in params:
            assert p.seed is not None
            i = self.pos.get(p.seed, 0)
            self.pos[p.seed] = i + 1
            script = self.scripts[p.seed]
            out.append(script[i] if i < len(script) else 5)
        return out


class SpyPredictor:
    name = "spy"
    expensive = False

    def __init__(self) -> None:
        self.seen: list[tuple[str | None, int]] = []

    def predict(self, requests: list[Request]) -> list[Prediction]:
        for r in requests:
            if r.in_call:
                self.seen.append((r.calls[-1].tool, r.calls[-1].args_len))
        return [Prediction(10.0, 1.0, 5.0) for _ in requests]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("tools") / "m", seed=3)


def engine_with(model: Path, scripts: dict[int, list[str]]) -> tuple[LLMEngine, SpyPredictor]:
    args = EngineArgs(str(model), "augserve", dtype="fp32", num_device_blocks=64, block_size=8,
                      num_host_blocks=16)  # fmt: skip
    engine = build_engine(args)
    tok = engine.tokenizer
    assert tok is not None
    ids = {seed: [t for s in parts for t in tok.encode(s, add_special_tokens=False)]
           for seed, parts in scripts.items()}  # fmt: skip
    engine.runner.sampler = ScriptedSampler(ids)  # type: ignore[assignment]
    spy = SpyPredictor()
    engine.predictor = spy
    engine.scheduler.predictor = spy
    return engine, spy


def params(seed: int, max_tokens: int = 40) -> SamplingParams:
    return SamplingParams(temperature=0.0, seed=seed, max_tokens=max_tokens, ignore_eos=True,
                          stop=["DONE"])  # fmt: skip


async def collect(aengine: AsyncLLMEngine, prompt: str, sp: SamplingParams,
                  tools: ToolSession) -> list[RequestOutput]:  # fmt: skip
    return [o async for o in aengine.generate(prompt, sp, tools=tools)]


def test_server_tool_pauses_runs_and_resumes(model: Path) -> None:
    engine, spy = engine_with(model, {1: [' CALL calc {"x": 2} END', " it is 4 DONE"]})
    ran: list[ParsedCall] = []

    async def executor(call: ParsedCall) -> str:
        ran.append(call)
        assert engine.num_in_calls() == 1 and engine.stats().num_paused  # paused meanwhile
        await asyncio.sleep(0.05)
        return " RESULT 4 "

    async def main() -> list[RequestOutput]:
        aengine = AsyncLLMEngine(engine)
        try:
            return await collect(aengine, "Compute", params(1), ToolSession(Parser(), executor))
        finally:
            await aengine.shutdown()

    outs = asyncio.run(main())
    final = outs[-1]
    assert ran == [ParsedCall("calc", {"x": 2}, 'CALL calc {"x": 2} END')]
    assert final.finished and final.finish_reason == "stop" and final.num_calls == 1
    [res] = final.tool_results
    assert res.text == " RESULT 4 " and not res.error and res.end >= res.start
    assert "RESULT 4" in final.text and final.text.endswith("it is 4 ")
    assert final.segment_text == " it is 4 "  # after the tool result, stop string cut
    streamed = "".join(o.delta_text for o in outs)
    assert "RESULT" not in streamed and streamed.startswith(" CALL calc")  # deltas: generated
    # the tool name and argument size reached the predictor when the call started
    assert spy.seen[0] == ("calc", len(json.dumps({"x": 2})))
    assert engine.stats().device_blocks_used == 0


def test_unknown_tool_goes_back_to_the_client(model: Path) -> None:
    engine, _ = engine_with(model, {2: [' CALL weather {"city": "Oslo"} END', " more"]})

    async def executor(call: ParsedCall) -> str:
        raise AssertionError("the server must not run a client tool")

    async def main() -> list[RequestOutput]:
        aengine = AsyncLLMEngine(engine)
        session = ToolSession(Parser(), executor, server_tools=frozenset({"calc"}))
        try:
            return await collect(aengine, "Weather?", params(2), session)
        finally:
            await aengine.shutdown()

    final = asyncio.run(main())[-1]
    assert final.finish_reason == "tool_calls" and final.finished
    assert final.tool_calls == [
        ParsedCall("weather", {"city": "Oslo"}, 'CALL weather {"city": "Oslo"} END')
    ]
    assert final.outputs[0].tool_calls == final.tool_calls and final.num_calls == 0
    # the request's KV stays as a paused client session (soft, `sched/sessions.py`)
    stats = engine.stats()
    assert stats.num_sessions == 1 and stats.device_blocks_used > 0
    assert not engine.has_unfinished()


def test_failing_tool_answers_with_its_error(model: Path) -> None:
    engine, _ = engine_with(model, {3: [' CALL calc {"x": 1} END', " sorry DONE"]})

    async def executor(call: ParsedCall) -> str:
        raise RuntimeError("division by zero")

    async def main() -> list[RequestOutput]:
        aengine = AsyncLLMEngine(engine)
        try:
            return await collect(aengine, "Compute", params(3), ToolSession(Parser(), executor))
        finally:
            await aengine.shutdown()

    final = asyncio.run(main())[-1]
    [res] = final.tool_results
    assert res.error and res.text == "Error: division by zero"
    assert final.finish_reason == "stop" and "sorry" in final.segment_text
