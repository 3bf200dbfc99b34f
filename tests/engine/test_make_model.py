"""`make_model`: the tokenizer fills the model's whole vocabulary with text, `untied`
gives the model an LM head of its own, and Hugging Face loads what it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors import safe_open

from augserve.engine.make_model import make_model
from augserve.engine.make_tokenizer import MIN_VOCAB, build_tokenizer
from augserve.engine.tokenizer import IncrementalDetokenizer, Tokenizer

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.mark.parametrize("vocab", [MIN_VOCAB, 512, 1000, 4096])
def test_tokenizer_covers_the_vocabulary_with_text(vocab: int) -> None:
    tok = build_tokenizer(vocab)
    assert tok.get_vocab_size() == vocab
    texts = [tok.decode([i]) for i in range(3, vocab)]
    empty = [i for i, t in enumerate(texts) if not t]
    # only lone bytes that print nothing on their own: 30 control bytes, 128 high bytes
    assert len(empty) <= 158 and all(3 + i < MIN_VOCAB for i in empty)
    assert all(t.isprintable() or t.strip(" \t\n\r") == "" for t in texts)
    assert [tok.decode([i], skip_special_tokens=False) for i in range(3)] == [
        "<s>",
        "</s>",
        "<pad>",
    ]
    if vocab > 1000:  # filler words past the trained merges: whole words with a space
        assert all(t.startswith(" ") and t[1:].isalpha() for t in texts[-500:])


def test_tokenizer_round_trips_and_streams_partial_utf8() -> None:
    tok = build_tokenizer(1000)
    text = "The tool returns 84, café! 日本\n\tok"
    ids = tok.encode(text).ids
    assert tok.decode(ids) == text
    assert tok.decode([tok.token_to_id("Ã")]) == ""  # half of a UTF-8 character
    with pytest.raises(ValueError, match="vocab_size"):
        build_tokenizer(MIN_VOCAB - 1)


def test_streaming_detokenizer_on_a_made_model(tmp_path: Path) -> None:
    d = make_model("llama", "tiny", tmp_path / "m", overrides={"vocab_size": 700})
    tok = Tokenizer(d)
    assert tok.vocab_size == 700
    text = "Mémoire: 12 × 7 = 84"
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.add([i]) for i in tok.encode(text, add_special_tokens=False)]
    assert "".join(pieces) == text == detok.text
    assert any(p == "" for p in pieces)  # 'é' and '×' are held back until complete


@pytest.mark.parametrize("arch", ["llama", "opt", "gptj"])
def test_untied_models_have_their_own_head_and_load_in_hf(tmp_path: Path, arch: str) -> None:
    from transformers import AutoModelForCausalLM

    tied = make_model(arch, "tiny", tmp_path / "tied", overrides={"tie_word_embeddings": True})
    d = make_model(arch, "tiny", tmp_path / "untied", untied=True)
    assert json.loads((d / "config.json").read_text())["tie_word_embeddings"] is False
    with safe_open(str(d / "model.safetensors"), framework="pt") as f:
        assert "lm_head.weight" in f.keys()  # noqa: SIM118
    if arch != "gptj":  # GPT-J has an LM head (with a bias) either way
        with safe_open(str(tied / "model.safetensors"), framework="pt") as f:
            assert "lm_head.weight" not in f.keys()  # noqa: SIM118
    hf = AutoModelForCausalLM.from_pretrained(str(d))
    head = hf.get_output_embeddings().weight
    assert head.data_ptr() != hf.get_input_embeddings().weight.data_ptr()
