"""Thin tokenizer wrapper over a model dir's tokenizer.json (+ tokenizer_config.json)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from augserve.engine.chat import ChatTemplate
from augserve.engine.loader import load_optional_json

LONG_TEXT = 8192  # characters: longer texts are encoded without holding the GIL


def _token_str(v: Any) -> str | None:
    """tokenizer_config special tokens are either strings or {'content': ...}."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def _ids(v: Any) -> list[int]:
    if isinstance(v, int) and not isinstance(v, bool):
        return [v]
    if isinstance(v, list):
        return [x for x in v if isinstance(x, int)]
    return []


def read_eos_token_ids(
    model_dir: str | Path, lookup: Callable[[str], int | None] | None = None
) -> tuple[int, ...]:
    """EOS ids from config.json, generation_config.json and tokenizer_config's eos_token,
    whose id `lookup` finds (a loaded tokenizer's `token_to_id`; without one,
    tokenizer.json is loaded for it: ~45 MB resident for a 150k vocabulary, which the
    allocator may keep after it is freed)."""
    d = Path(model_dir)
    ids: list[int] = []
    for name in ("config.json", "generation_config.json"):
        ids += _ids(load_optional_json(d / name).get("eos_token_id"))
    eos = _token_str(load_optional_json(d / "tokenizer_config.json").get("eos_token"))
    if eos is not None and lookup is None and (d / "tokenizer.json").is_file():
        lookup = HFTokenizer.from_file(str(d / "tokenizer.json")).token_to_id
    if eos is not None and lookup is not None:
        tid = lookup(eos)
        if tid is not None:
            ids.append(tid)
    return tuple(dict.fromkeys(ids))


def _chat_template(model_dir: Path) -> ChatTemplate | None:
    """The model directory's chat template (chat_template.jinja wins over
    tokenizer_config.json's, as in transformers 5), or None."""
    try:
        return ChatTemplate.from_model_dir(model_dir)
    except ValueError:
        return None


class Tokenizer:
    """encode / decode / chat template over `tokenizers`."""

    def __init__(self, model_dir: str | Path) -> None:
        d = Path(model_dir)
        path = d / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"missing file: {path}")
        self._tok = HFTokenizer.from_file(str(path))
        cfg = load_optional_json(d / "tokenizer_config.json")
        self.bos_token = _token_str(cfg.get("bos_token"))
        self.eos_token = _token_str(cfg.get("eos_token"))
        self.bos_token_id = self._tok.token_to_id(self.bos_token) if self.bos_token else None
        self.add_bos = bool(cfg.get("add_bos_token", False)) and self.bos_token_id is not None
        self._template = _chat_template(d)
        self.chat_template: str | None = self._template.source if self._template else None
        self.eos_token_ids = read_eos_token_ids(d, self._tok.token_to_id)  # one copy loaded

    @property
    def backend(self) -> HFTokenizer:
        """The `tokenizers.Tokenizer` underneath (for xgrammar's vocabulary)."""
        return self._tok

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size())

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`. A long text goes through `encode_batch`, which releases
        the GIL (`encode` holds it: 13 s for 3.9 MB), so other threads (the server's
        event loop) run meanwhile; the ids are the same."""
        if len(text) > LONG_TEXT:
            ids = list(self._tok.encode_batch([text], add_special_tokens=False)[0].ids)
        else:
            ids = list(self._tok.encode(text, add_special_tokens=False).ids)
        bos = self.bos_token_id
        if add_special_tokens and self.add_bos and bos is not None and ids[:1] != [bos]:
            ids.insert(0, bos)
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        if len(ids) > LONG_TEXT // 4:  # `decode_batch` releases the GIL too
            return str(self._tok.decode_batch([ids], skip_special_tokens=skip_special_tokens)[0])
        return str(self._tok.decode(ids, skip_special_tokens=skip_special_tokens))

    @functools.cached_property
    def max_token_bytes(self) -> int:
        """The most UTF-8 bytes of a vocabulary entry: a text of more than
        `max_token_bytes` x N bytes cannot be N tokens (byte-level and SentencePiece
        entries spell each byte they stand for with at least one byte)."""
        return max((len(t.encode("utf-8")) for t in self._tok.get_vocab()), default=1)

    def apply_chat_template(
        self, messages: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """Render with the model's chat template (chat_template.jinja, else tokenizer_config's
        `chat_template`) if it has one and jinja2 is installed, else a simple fallback:
        '<|role|>\\ncontent\\n' per message, then '<|assistant|>\\n'."""
        if self._template is not None:
            try:
                import jinja2  # noqa: F401 - the template renders with jinja2
            except ImportError:
                pass
            else:
                return self._template.render(messages, add_generation_prompt=add_generation_prompt)
        text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
        return text + ("<|assistant|>\n" if add_generation_prompt else "")


def as_ids(tokenizer: Tokenizer | None, value: str | Sequence[int], what: str) -> list[int]:
    """The token ids of a prompt (`what` = "prompt": with the special tokens) or of a
    call result (without): a text tokenized, ids as they are."""
    if isinstance(value, str):
        if tokenizer is None:
            raise ValueError(f"a text {what} needs a tokenizer")
        return tokenizer.encode(value, add_special_tokens=what == "prompt")
    return [int(t) for t in value]


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas, holding back partial UTF-8."""

    def __init__(self, tokenizer: Tokenizer, prompt_ids: list[int] | None = None) -> None:
        self.tok = tokenizer
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0
        self.text = ""
        if prompt_ids:  # decode relative to a few prompt tokens for correct spacing
            tail = prompt_ids[-4:]
            self.ids = list(tail)
            self.read_offset = len(tail)

    def add(self, new_ids: list[int]) -> str:
        """Append tokens; return the newly completed text (may be '')."""
        self.ids.extend(new_ids)
        prefix = self.tok.decode(self.ids[self.prefix_offset : self.read_offset])
        full = self.tok.decode(self.ids[self.prefix_offset :])
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            delta = full[len(prefix) :]
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            self.text += delta
            return delta
        return ""
