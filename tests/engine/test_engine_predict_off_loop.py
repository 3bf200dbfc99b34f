"""An expensive predictor runs off the async engine's loop: others keep decoding."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from augserve.core.config import SchedulerConfig
from augserve.core.prediction import Prediction
from augserve.core.request import Request, Segment
from augserve.engine.async_engine import AsyncLLMEngine
from augserve.engine.engine import LLMEngine
from augserve.engine.make_model import make_model
from augserve.engine.model_runner import ModelRunner
from augserve.engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=400)


class SlowPredictor:
    """A slow predictor, like a big learned model: a prediction for "tool" returns only
    once "busy" has decoded `AHEAD` more tokens (`decoded`, counted on the event loop),
    which never happens if the prediction blocks the loop (it then gives up after a
    minute). Records where it ran and how many tokens "busy" decoded meanwhile."""

    name = "slow"
    expensive = True
    AHEAD = 5

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.seen: list[tuple[str, int, int]] = []  # (id, segment index, context length)
        self.decoded = 0  # tokens "busy" has streamed so far (written by the loop)
        self.during: list[int] = []  # tokens "busy" decoded during each "tool" prediction

    def predict(self, requests: Sequence[Request]) -> list[Prediction]:
        if any(r.request_id == "tool" for r in requests):
            start, deadline = self.decoded, time.monotonic() + 60
            while self.decoded < start + self.AHEAD and time.monotonic() < deadline:
                time.sleep(0.001)
            self.during.append(self.decoded - start)
        self.threads.append(threading.get_ident())
        self.seen.extend((r.request_id, r.segment_index, r.num_tokens) for r in requests)
        return [Prediction(output_len=42.0, call_time=1.5) for _ in requests]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory):
    return make_model("llama", "tiny", tmp_path_factory.mktemp("slowpred") / "m", seed=3)


def test_slow_predictor_never_blocks_the_loop(model_dir) -> None:
    predictor = SlowPredictor()
    runner = ModelRunner.from_dir(model_dir, "fp32", block_size=4, num_device_blocks=128)
    engine = LLMEngine(runner, SchedulerConfig(policy="augserve"), predictor=predictor)
    loop_thread = threading.get_ident()

    async def main() -> tuple[int, Request]:
        aeng = AsyncLLMEngine(engine)
        first = aeng.generate([5, 6, 7, 8], GREEDY, request_id="busy")
        await first.__anext__()  # "busy" is admitted and decoding
        tokens_during = 0

        async def consume() -> None:
            nonlocal tokens_during
            async for _ in first:
                tokens_during += 1
                predictor.decoded = tokens_during

        busy = asyncio.create_task(consume())
        plan = [Segment(3, call_time=0.0, return_len=4), Segment(2)]
        async for _ in aeng.generate([9, 10, 11], GREEDY, request_id="tool", segments=plan):
            pass
        made = tokens_during
        aeng.abort("busy")
        busy.cancel()
        await aeng.shutdown()
        return made, engine_requests["tool"]

    engine_requests: dict[str, Request] = {}
    real_add = engine.add

    def spy_add(req, params, now=None, prediction=None, **kw):  # type: ignore[no-untyped-def]
        engine_requests[req.request_id] = req
        assert prediction is not None or req.request_id == "busy"
        return real_add(req, params, now, prediction, **kw)

    engine.add = spy_add  # type: ignore[method-assign]
    made, tool = asyncio.run(main())
    # two slow predictions (arrival and the return) ran in worker threads...
    assert loop_thread not in predictor.threads
    assert [(rid, k) for rid, k, _ in predictor.seen if rid == "tool"] == [("tool", 0), ("tool", 1)]
    # ...the second for the state after the return: 3 prompt + 3 generated + 4 returned
    assert ("tool", 1, 10) in predictor.seen
    assert tool.pred_output_len == 42.0 and tool.num_returned_tokens == 4
    # and the busy request kept decoding meanwhile
    assert len(predictor.during) == 2 and min(predictor.during) >= SlowPredictor.AHEAD
    assert made >= 2 * SlowPredictor.AHEAD
