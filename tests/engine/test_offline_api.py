"""The offline API has vLLM's shape: `outputs[i].text / .token_ids`, `SamplingParams(n=...)`,
`LLM.chat(messages)` with the model's chat template."""

from __future__ import annotations

from pathlib import Path

import pytest

from augserve import LLM, SamplingParams
from augserve.engine.make_model import make_model


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> LLM:
    model = make_model("llama", "tiny", tmp_path_factory.mktemp("api") / "m", seed=2)
    return LLM(model, dtype="fp32", num_device_blocks=128, block_size=8)


def test_outputs_carry_text_and_token_ids(llm: LLM) -> None:
    [out] = llm.generate("Hello there", SamplingParams(temperature=0.0, max_tokens=5))
    [comp] = out.outputs
    assert comp.index == 0 and comp.token_ids == out.token_ids and len(comp.token_ids) == 5
    assert comp.text == out.text == llm.tokenizer.decode(comp.token_ids)
    assert comp.finish_reason == out.finish_reason == "length"
    assert out.prompt_token_ids == llm.tokenizer.encode("Hello there")


def test_n_samples_per_prompt(llm: LLM) -> None:
    params = SamplingParams(n=4, temperature=1.0, seed=7, max_tokens=6, ignore_eos=True)
    outs = llm.generate(["a b c", "d e"], params)
    assert len(outs) == 2
    for out in outs:
        assert [c.index for c in out.outputs] == [0, 1, 2, 3]
        assert all(len(c.token_ids) == 6 for c in out.outputs)
        assert len({tuple(c.token_ids) for c in out.outputs}) > 1  # the samples differ
    # sample i draws with seed + i: sample 2 is what n=1 with seed 9 gives
    [one] = llm.generate("a b c", SamplingParams(temperature=1.0, seed=9, max_tokens=6,
                                                  ignore_eos=True))  # fmt: skip
    assert outs[0].outputs[2].token_ids == one.token_ids
    # and the whole thing is reproducible
    again = llm.generate(["a b c", "d e"], params)
    assert [[c.token_ids for c in o.outputs] for o in again] == [
        [c.token_ids for c in o.outputs] for o in outs
    ]


def test_n_must_be_positive() -> None:
    with pytest.raises(ValueError, match="n must be"):
        SamplingParams(n=0)


def test_chat_renders_the_template(llm: LLM, tmp_path: Path) -> None:
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    [out] = llm.chat(conv, SamplingParams(temperature=0.0, max_tokens=4))
    expected = llm.tokenizer.apply_chat_template(conv, add_generation_prompt=True)
    assert out.prompt == expected and "Hi!" in expected and "Be brief." in expected
    assert len(out.outputs[0].token_ids) == 4
    outs = llm.chat([conv, conv[1:]], SamplingParams(temperature=0.0, max_tokens=3))
    assert len(outs) == 2 and outs[0].prompt != outs[1].prompt
