"""Long texts are tokenized through `encode_batch`, which releases the GIL (the plain
`encode` held it: the server's event loop froze for 60 s on a 3.9 MB /tokenize);
the ids, and the decoded text, are the same."""

from __future__ import annotations

from pathlib import Path

from augserve.engine.tokenizer import LONG_TEXT, Tokenizer


def test_a_long_text_gives_the_same_ids_and_text_as_a_short_call(
    model_dirs: dict[str, Path],
) -> None:
    tok = Tokenizer(model_dirs["llama_gqa"])
    text = "Ünïcode, digits 12345 and   spaces.\n" * (LONG_TEXT // 20)
    assert len(text) > LONG_TEXT
    ids = tok.encode(text, add_special_tokens=False)
    assert ids == list(tok.backend.encode(text, add_special_tokens=False).ids)
    assert len(ids) > LONG_TEXT // 4
    assert tok.decode(ids) == tok.backend.decode(ids, skip_special_tokens=True)
    assert tok.max_token_bytes >= max(len(t.encode()) for t in tok.backend.get_vocab())
