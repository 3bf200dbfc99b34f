"""A `tokenizers` tokenizer from a GGUF file's `tokenizer.ggml.*` metadata.

A GGUF has no tokenizer.json: it stores the vocabulary (`tokens`), the BPE
`merges` or per-token `scores`, the token types and the special token ids,
under llama.cpp's key names. `build_tokenizer` rebuilds the tokenizer they
describe:

- `gpt2` (byte-level BPE: SmolLM, Llama 3, Qwen2): the vocabulary and merges
  as stored, with the pre-tokenizer split llama.cpp uses for the file's
  `tokenizer.ggml.pre` (SmolLM splits digits one by one; Llama 3 and Qwen2 have
  their own regexes; others get GPT-2's).
- `llama` (SentencePiece BPE with byte fallback: Llama 2, Mistral, TinyLlama):
  merges recovered from the scores (a merge ranks as the score of the token it
  makes), '▁' for spaces, a space prefix when `add_space_prefix` says so.

Tokens of type CONTROL (3) become special tokens, USER_DEFINED (4) added
tokens, so that `<|im_start|>` stays one token. Another tokenizer model is a
ValueError naming it.
"""

from __future__ import annotations

from typing import Any

CONTROL, USER_DEFINED = 3, 4

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SPLITS = {"llama-bpe": _LLAMA3_SPLIT, "llama3": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT}
_DIGIT_SPLIT = ("smollm",)  # llama.cpp: each digit on its own, then GPT-2's regex


def _byte_level_pre(pre: str | None) -> Any:
    from tokenizers import Regex, pre_tokenizers

    if pre in _SPLITS:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_SPLITS[pre]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _DIGIT_SPLIT:
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    return byte_level


def _gpt2(meta: dict[str, Any]) -> Any:
    from tokenizers import Tokenizer, decoders, models

    vocab = {t: i for i, t in enumerate(meta["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in meta.get("merges") or []]
    ignore = meta.get("pre") in ("llama-bpe", "llama3")  # as Llama 3's tokenizer.json
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=ignore))
    tok.pre_tokenizer = _byte_level_pre(meta.get("pre"))
    tok.decoder = decoders.ByteLevel()
    return tok


def spm_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """BPE merges implied by a SentencePiece vocabulary: every split of a token into two
    tokens of the vocabulary, ranked by the merged token's score (best first)."""
    ids = {t: i for i, t in enumerate(tokens)}
    ranked: list[tuple[float, int, int, tuple[str, str]]] = []
    for token, i in ids.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ids and right in ids:
                ranked.append((-scores[i], ids[left], ids[right], (left, right)))
    ranked.sort()
    return [pair for *_, pair in ranked]


def _llama_spm(meta: dict[str, Any]) -> Any:
    from tokenizers import Tokenizer, decoders, models, normalizers

    tokens: list[str] = list(meta["tokens"])
    scores = [float(s) for s in meta.get("scores") or [0.0] * len(tokens)]
    unk_id = meta.get("unknown_token_id")
    unk = tokens[int(unk_id)] if unk_id is not None else None
    vocab = {t: i for i, t in enumerate(tokens)}
    model = models.BPE(vocab, spm_merges(tokens, scores), unk_token=unk, byte_fallback=True)
    tok = Tokenizer(model)
    steps: list[normalizers.Normalizer] = [normalizers.Replace(" ", "\u2581")]
    if meta.get("add_space_prefix", True):
        steps.insert(0, normalizers.Prepend("\u2581"))
    tok.normalizer = normalizers.Sequence(steps)
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("\u2581", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            *([decoders.Strip(" ", 1, 0)] if meta.get("add_space_prefix", True) else []),
        ]
    )
    return tok


_BUILDERS = {"gpt2": _gpt2, "llama": _llama_spm}


def tokenizer_meta(value: Any) -> dict[str, Any]:
    """The `tokenizer.ggml.*` fields of a GGUFFile-like object (with `.value(key)`)."""
    keys = ("model", "pre", "tokens", "merges", "scores", "token_type", "add_space_prefix")
    meta = {k: value(f"tokenizer.ggml.{k}") for k in keys}
    for k in ("bos", "eos", "unknown", "padding", "eot"):
        meta[f"{k}_token_id"] = value(f"tokenizer.ggml.{k}_token_id")
    meta["add_bos_token"] = value("tokenizer.ggml.add_bos_token")
    return {k: v for k, v in meta.items() if v is not None}


def build_tokenizer(meta: dict[str, Any], where: str = "GGUF") -> Any:
    """A `tokenizers.Tokenizer` for the metadata of `tokenizer_meta`."""
    from tokenizers import AddedToken

    kind = meta.get("model")
    if kind not in _BUILDERS:
        raise ValueError(
            f"{where}: tokenizer model {kind!r} is not supported (supported: gpt2, llama)"
        )
    if not meta.get("tokens"):
        raise ValueError(f"{where}: no tokenizer.ggml.tokens")
    tok = _BUILDERS[kind](meta)
    types = list(meta.get("token_type") or [])
    tokens = meta["tokens"]
    special = [AddedToken(t, special=True, normalized=False)
               for t, k in zip(tokens, types, strict=False) if k == CONTROL]  # fmt: skip
    added = [AddedToken(t, special=False, normalized=False)
             for t, k in zip(tokens, types, strict=False) if k == USER_DEFINED]  # fmt: skip
    if special:
        tok.add_special_tokens(special)
    if added:
        tok.add_tokens(added)
    return tok


def tokenizer_config(meta: dict[str, Any]) -> dict[str, Any]:
    """tokenizer_config.json fields: special tokens by text, add_bos_token."""
    tokens = meta["tokens"]
    cfg: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
    for key, name in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"),
                      ("pad_token", "padding")):  # fmt: skip
        tid = meta.get(f"{name}_token_id")
        if tid is not None and 0 <= int(tid) < len(tokens):
            cfg[key] = tokens[int(tid)]
    add_bos = meta.get("add_bos_token", meta.get("model") == "llama")
    cfg["add_bos_token"] = bool(add_bos)
    return cfg
