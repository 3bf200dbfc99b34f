"""A deterministic token-count approximation that needs no model files.

INFERCEPT's text entries must be tokenized at load time, but the project
ships no vocabulary. We count tokens as follows:

1. Split the text with GPT-2's pre-tokenizer regex (the same pattern
   `tokenizers.pre_tokenizers.ByteLevel(use_regex=True)` uses; here a
   stdlib-`re` transcription, so no dependency): contractions, an optional
   space + a run of letters, an optional space + a run of digits, an optional
   space + a run of other symbols, runs of whitespace.
2. Each piece counts `ceil(utf8_bytes / BYTES_PER_TOKEN)` tokens (at least 1):
   common English words are one BPE token, long or rare words split.

`BYTES_PER_TOKEN = 8` is a rule, not a fit: no text in the file has a known
token count to calibrate against. On English prose it gives about 1.1 tokens
per word, close to what Llama/GPT-2 BPE vocabularies give.
"""

from __future__ import annotations

import math
import re

BYTES_PER_TOKEN = 8

# GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
_PRETOKEN = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")


def pretokenize(text: str) -> list[str]:
    """GPT-2 style pre-tokens of `text`."""
    return _PRETOKEN.findall(text)


def approx_token_count(text: str) -> int:
    """Approximate BPE token count of `text` (0 for the empty string)."""
    return sum(
        max(1, math.ceil(len(piece.encode("utf-8")) / BYTES_PER_TOKEN))
        for piece in pretokenize(text)
    )
