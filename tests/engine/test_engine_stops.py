"""Stop tokens, stop strings, max_tokens and ignore_eos through the offline API."""

from __future__ import annotations

import pytest

from augserve import LLM, SamplingParams
from augserve.engine.make_model import make_model

PROMPT = "The quick brown fox jumps over"


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> LLM:
    path = make_model("llama", "tiny", tmp_path_factory.mktemp("stops") / "m", seed=1)
    return LLM(path, dtype="fp32", num_device_blocks=64, block_size=8)


def greedy(llm: LLM, **kw: object) -> tuple[list[int], str, str | None]:
    params = SamplingParams(**{"temperature": 0.0, "ignore_eos": True, "max_tokens": 24, **kw})
    out = llm.generate(PROMPT, params)[0]
    return out.token_ids, out.text, out.finish_reason


def test_max_tokens(llm: LLM) -> None:
    for n in (1, 7):
        ids, _, reason = greedy(llm, max_tokens=n)
        assert len(ids) == n and reason == "length"


def test_stop_token_ids(llm: LLM) -> None:
    ids, _, _ = greedy(llm)
    stop = ids[5]
    first = ids.index(stop)
    got, _, reason = greedy(llm, stop_token_ids=(stop,))
    assert got == ids[: first + 1] and reason == "stop"  # the stop token is reported


def test_eos_and_ignore_eos(llm: LLM) -> None:
    ids, _, _ = greedy(llm)
    eos = ids[4]
    saved = llm.engine.eos_token_ids
    llm.engine.eos_token_ids = frozenset({eos})
    try:
        got, _, reason = greedy(llm, ignore_eos=False)
        assert got == ids[: ids.index(eos) + 1] and reason == "stop"
        got, _, reason = greedy(llm, ignore_eos=True)
        assert got == ids and reason == "length"
    finally:
        llm.engine.eos_token_ids = saved


def test_stop_strings(llm: LLM) -> None:
    ids, text, _ = greedy(llm)
    assert len(text) > 6
    stop = text[4:7]
    got, got_text, reason = greedy(llm, stop=(stop, "\x00never"))
    assert reason == "stop"
    assert got_text == text[: text.index(stop)]
    assert got == ids[: len(got)] and len(got) < len(ids)


def test_batch_of_prompts_keeps_order(llm: LLM) -> None:
    prompts = ["Hello there", "What is the capital of France?", "12 times 7"]
    params = [SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=m) for m in (3, 5, 4)]
    outs = llm.generate(prompts, params)
    assert [len(o.token_ids) for o in outs] == [3, 5, 4]
    assert [o.prompt for o in outs] == prompts
    assert outs[1].prompt_token_ids == llm.tokenizer.encode(prompts[1])


def test_a_bad_prompt_rejects_the_batch(llm: LLM) -> None:
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate(["fine", [5] * 600], SamplingParams(max_tokens=2))
    assert not llm.engine.has_unfinished()
    assert llm.generate("fine", SamplingParams(temperature=0.0, max_tokens=2))[0].finished
