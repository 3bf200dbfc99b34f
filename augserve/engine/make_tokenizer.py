"""The byte-level BPE tokenizer of the random-weight model dirs (`make_model`).

It is trained at creation time, offline, with the `tokenizers` library on a small
built-in English text, then filled up to exactly the model's vocab_size with words
(the text's own, then pronounceable syllable words), so every id a model samples
decodes to text. Ids: <s>, </s>, <pad> are 0, 1, 2, then the 256 bytes, the merges
and the filler words. A lone byte that is not printable on its own (a control byte,
half of a UTF-8 character) decodes to nothing rather than to garbage. Nothing is
downloaded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

BUILTIN_TEXT = (
    "The quick brown fox jumps over the lazy dog. A request arrives at the server and waits "
    "in the queue until the scheduler admits it. The model reads the prompt, writes the "
    "first token, and then decodes one token at a time. When the model calls a tool, such "
    "as a calculator, a search engine or a weather service, the request pauses until the "
    "tool returns. The answer of the tool is appended to the context, and generation goes "
    "on. Memory on the device is limited, so the key and value cache of a paused request "
    "may be kept, swapped out to host memory, or discarded and recomputed later. "
    "Good scheduling keeps the latency low and the throughput high for every user. "
    "What is the capital of France? Paris is the capital of France. How many days are "
    "there in a week? There are seven days in a week. Please compute 12 times 7; the "
    "result is 84. The sun rises in the east and sets in the west. Thank you very much!\n"
)
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>"]

# dropped when decoding: control bytes (but tab, newline, return) and U+FFFD, which is
# what a lone byte of a multi-byte character decodes to
_UNPRINTABLE = "[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f\ufffd]"
MIN_VOCAB = 256 + len(SPECIAL_TOKENS)


def filler_words() -> Iterator[str]:
    """Words for the ids the BPE training did not fill: BUILTIN_TEXT's words, then
    pronounceable two- and three-syllable words ('bako', 'mirelu', ...), in a fixed order."""
    yield from dict.fromkeys(re.findall(r"[A-Za-z]+", BUILTIN_TEXT))
    syl = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    yield from (a + b for a in syl for b in syl)
    yield from (a + b + c for a in syl for b in syl for c in syl)


def build_tokenizer(vocab_size: int) -> Any:
    """A byte-level BPE tokenizer of exactly `vocab_size` entries (see the module doc)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < MIN_VOCAB:
        raise ValueError(f"vocab_size must be >= {MIN_VOCAB} for a byte-level tokenizer")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=min(vocab_size, 4096),
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([BUILTIN_TEXT] * 4, trainer=trainer)
    spec = json.loads(tok.to_str())
    vocab: dict[str, int] = spec["model"]["vocab"]
    words = filler_words()
    while len(vocab) < vocab_size:
        token = "\u0120" + next(words)  # the byte-level spelling of " word"
        vocab.setdefault(token, len(vocab))
    full = Tokenizer.from_str(json.dumps(spec))
    full.decoder = decoders.Sequence(
        [decoders.ByteLevel(), decoders.Replace(Regex(_UNPRINTABLE), "")]
    )
    return full
