"""Client sessions on the engine: a request that ends with "tool_calls" keeps its KV as a
paused session, and the client's next turn prefills only its new tokens.

A scripted sampler forces the tokens (random weights never emit a call). Time is the
engine's virtual `now`, so nothing here depends on wall time. On the code before
sessions (or with `session_ttl=0`) the first turn's blocks were freed at "tool_calls":
the prefix cache then gives the next turn its 5 full blocks (40 tokens) and it
recomputes the 7 tokens of the partial last one (its prefill starts at 40, not 47),
and the client's round trip is never learned.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from augserve.core.prediction import client_key
from augserve.engine.builder import EngineArgs, build_engine
from augserve.engine.engine import LLMEngine
from augserve.engine.make_model import make_model
from augserve.engine.outputs import RequestOutput
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tools import ToolSession
from tests.engine.test_tool_session import Parser, ScriptedSampler

CLIENT = ToolSession(Parser())  # no executor: every call goes back to the client
TTL = 30.0


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_model("llama", "tiny", tmp_path_factory.mktemp("sessions") / "m", seed=3)


def engine_with(model: Path, scripts: dict[int, list[str]], ttl: float = TTL) -> LLMEngine:
    args = EngineArgs(str(model), "augserve", dtype="fp32", num_device_blocks=64, block_size=8,
                      session_ttl=ttl, enable_prefix_caching=True)  # fmt: skip
    engine = build_engine(args)
    tok = engine.tokenizer
    assert tok is not None
    ids = {seed: [t for s in parts for t in tok.encode(s, add_special_tokens=False)]
           for seed, parts in scripts.items()}  # fmt: skip
    engine.runner.sampler = ScriptedSampler(ids)  # type: ignore[assignment]
    return engine


def params(seed: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, seed=seed, max_tokens=30, ignore_eos=True,
                          stop=["DONE"])  # fmt: skip


class Turns:
    """Runs requests on the engine's virtual clock and records every chunk."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.now = 0.0
        self.chunks: dict[str, list[tuple[int, int]]] = {}  # id -> [(start, tokens)]
        self.done: dict[str, RequestOutput] = {}  # final outputs

    def add(self, rid: str, ids: list[int], seed: int, session_id: str | None = None) -> None:
        e = self.engine
        req = e.make_request(rid, ids, params(seed), now=self.now, session_id=session_id)
        e.add(req, params(seed), self.now, tools=CLIENT)

    def run(self, rid: str) -> RequestOutput:
        for _ in range(500):
            if rid in self.done:
                return self.done[rid]
            step = self.engine.step(now=self.now)
            self.now += 0.01
            if step.scheduled is not None:
                for c in step.scheduled.chunks:
                    self.chunks.setdefault(c.request_id, []).append((c.start_pos, c.num_tokens))
            self.done.update((o.request_id, o) for o in step.outputs if o.finished)
        raise AssertionError(f"{rid} did not finish")

    def computed(self, rid: str) -> int:
        return sum(n for _, n in self.chunks[rid])


def first_turn(model: Path, ttl: float = TTL) -> tuple[Turns, RequestOutput, list[int]]:
    engine = engine_with(model, {1: [' CALL weather {"city": "Oslo"} END'], 2: [" sunny DONE"]},
                         ttl)  # fmt: skip
    t = Turns(engine)
    assert engine.tokenizer is not None
    t.add("turn1", engine.tokenizer.encode("What is the weather in Oslo today, please?"), 1)
    out = t.run("turn1")
    assert out.finish_reason == "tool_calls" and out.tool_calls[0].name == "weather"
    context = out.prompt_token_ids + out.token_ids
    return t, out, context


def test_round_trip_resumes_the_session_with_only_the_new_tokens(model: Path) -> None:
    t, out, context = first_turn(model)
    engine = t.engine
    stats = engine.stats()
    assert stats.num_sessions == 1 and stats.device_blocks_used > 0  # KV kept, paused
    assert not engine.has_unfinished()  # the engine has nothing more to report for it
    kept = len(context) - 1  # every token but the last sampled one has KV
    assert engine.tokenizer is not None
    result = engine.tokenizer.encode(" RESULT: sunny, 21 C. ", add_special_tokens=False)
    t.now += 3.0  # the client ran the tool
    t.add("turn2", context + result, 2)
    out2 = t.run("turn2")
    assert out2.finish_reason == "stop" and out2.text == " sunny "
    start, n = t.chunks["turn2"][0]
    assert start == kept and n == len(result) + 1  # only the new tokens are prefilled
    # then one decode step per further generated token
    assert t.computed("turn2") == len(result) + 1 + out2.num_generated_tokens - 1
    assert out2.num_cached_tokens == kept  # usage.prompt_tokens_details.cached_tokens
    assert engine.stats().num_sessions == 0
    rt = engine.predictor.calls.predict(client_key("weather"), 16)  # type: ignore[attr-defined]
    assert rt > 1.0  # learned from the 3 s round trip (the prior is 1 s)


def test_a_continuation_that_does_not_match_starts_fresh(model: Path) -> None:
    t, _, context = first_turn(model)
    assert t.engine.tokenizer is not None
    other = t.engine.tokenizer.encode("Something else entirely, please.")
    t.add("other", other, 2)
    out = t.run("other")
    assert t.chunks["other"][0][0] == 0
    assert t.computed("other") == len(other) + out.num_generated_tokens - 1
    assert t.engine.stats().num_sessions == 1  # the session waits on


def test_a_session_id_match_resumes_it(model: Path) -> None:
    call = ' CALL weather {"city": "Oslo"} END'
    engine = engine_with(model, {1: [call], 3: [call], 2: [" sunny DONE"]})
    t = Turns(engine)
    assert engine.tokenizer is not None
    prompt = engine.tokenizer.encode("What is the weather in Oslo today, please?")
    t.add("a", prompt, 1, session_id="agent-a")
    t.add("b", prompt, 3, session_id="agent-b")
    out_a, out_b = t.run("a"), t.run("b")
    context = out_b.prompt_token_ids + out_b.token_ids
    assert context == out_a.prompt_token_ids + out_a.token_ids  # by prefix: either fits
    assert engine.stats().num_sessions == 2
    result = engine.tokenizer.encode(" RESULT: rain. ", add_special_tokens=False)
    t.add("b2", context + result, 2, session_id="agent-b")  # the header / extra_body id
    assert engine.scheduler.is_paused("a") and not engine.scheduler.is_paused("b")
    t.run("b2")
    assert t.chunks["b2"][0] == (len(context) - 1, len(result) + 1)
    assert engine.stats().num_sessions == 1


def test_an_expired_session_frees_its_blocks(model: Path) -> None:
    t, _, _ = first_turn(model, ttl=5.0)
    engine = t.engine
    assert engine.stats().device_blocks_used > 0
    t.now += 4.0
    engine.step(now=t.now)
    assert engine.stats().num_sessions == 1
    t.now += 1.5
    engine.step(now=t.now)
    stats = engine.stats()
    assert stats.num_sessions == 0 and stats.device_blocks_used == 0
    assert stats.device_blocks_cached > 0  # its full blocks stay in the prefix cache
