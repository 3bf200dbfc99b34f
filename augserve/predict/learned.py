"""The learned predictor: sentence embedding + metadata -> gradient-boosted heads.

Per segment (docs/paper.md section 5), from the features of `features.py` plus a
PCA-reduced all-MiniLM-L6-v2 embedding of the prompt text where there is text:

- `bucket`: output length as a classifier over 50-token buckets (the
  prediction is the bucket's middle; when part of the segment is already
  generated, buckets that are already passed are masked out);
- `call`: whether the segment ends in an external call (classifier);
- `call_time`: that call's duration in seconds (regressor, squared error);
- `return_len`: tokens the call returns (regressor).

Heads are scikit-learn `HistGradientBoosting*` models: on ~2,000 tabular rows
they train in seconds on two cores, need no feature scaling, and predict a
batch in about a millisecond. A directory holds `manifest.json` (format,
feature spec, versions, training split, sha256 of the weights) and
`heads.joblib` (pickled scikit-learn objects: load only directories you trust;
the checksum is verified before unpickling). Training: `augserve.predict.train`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from augserve.core.prediction import Prediction
from augserve.core.request import Request
from augserve.predict.embed import MiniLMEmbedder
from augserve.predict.features import (
    BUCKET_SIZE,
    bucket_middle,
    meta_matrix,
)
from augserve.predict.store import read_model_dir, write_model_dir


@dataclass(frozen=True)
class LearnedConfig:
    """Training options; recorded in the manifest."""

    embed: bool = True  # MiniLM embedding of the prompt text (False: metadata only)
    use_kind: bool = False  # one-hot augmentation kind (needs `kind` on live requests)
    pca_dim: int = 16
    n_buckets: int = 12  # 50-token buckets; the last one is open-ended (>= 550 tokens)
    max_iter: int = 60  # boosting rounds: predict cost grows with rounds x buckets
    learning_rate: float = 0.15
    max_leaf_nodes: int = 15
    min_samples_leaf: int = 10
    l2_regularization: float = 1.0
    max_seq_length: int = 128  # word pieces of prompt text the embedding reads
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_buckets < 2:
            raise ValueError(f"LearnedConfig.n_buckets must be >= 2, got {self.n_buckets}")
        if self.pca_dim < 1:
            raise ValueError(f"LearnedConfig.pca_dim must be >= 1, got {self.pca_dim}")
        if self.max_iter < 1:
            raise ValueError(f"LearnedConfig.max_iter must be >= 1, got {self.max_iter}")


@dataclass
class SegmentEstimates:
    """Raw head outputs for a batch (arrays of length n)."""

    bucket_proba: np.ndarray  # [n, n_buckets]
    p_call: np.ndarray
    call_time: np.ndarray
    return_len: np.ndarray


@dataclass
class LearnedPredictor:
    """`Predictor` over the trained heads. Never reads `Request.segments`."""

    manifest: dict[str, Any]
    heads: dict[str, Any]
    embedder: MiniLMEmbedder | None = None
    name: str = field(default="learned")
    expensive = True  # milliseconds per call: engines run it off their loop

    def __post_init__(self) -> None:
        self.n_buckets = int(self.manifest["n_buckets"])
        self.kinds: list[str] | None = self.manifest["features"]["kinds"]
        emb = self.manifest["features"]["embedding"]
        if emb is not None and self.embedder is None:
            self.embedder = MiniLMEmbedder(max_seq_length=int(emb["max_seq_length"]))
        self._use_text = emb is not None

    # --- features ----------------------------------------------------------
    def features(
        self, requests: Sequence[Request], row_kinds: Sequence[str | None] | None = None
    ) -> np.ndarray:
        meta = meta_matrix(requests, self.kinds, row_kinds)
        if not self._use_text:
            return meta
        return np.hstack([meta, _text_features(self, [r.prompt_text for r in requests])])

    # --- heads -------------------------------------------------------------
    def estimate(
        self, requests: Sequence[Request], row_kinds: Sequence[str | None] | None = None
    ) -> SegmentEstimates:
        x = self.features(requests, row_kinds)
        h = self.heads
        proba = np.zeros((len(requests), self.n_buckets))
        proba[:, h["bucket"].classes_.astype(int)] = h["bucket"].predict_proba(x)
        p_call = _positive_proba(h["call"], x)
        return SegmentEstimates(
            bucket_proba=proba,
            p_call=p_call,
            call_time=np.maximum(0.0, h["call_time"].predict(x)),
            return_len=np.maximum(0.0, h["return_len"].predict(x)),
        )

    def predict(self, requests: Sequence[Request]) -> list[Prediction]:
        if not requests:
            return []
        with single_thread():
            est = self.estimate(requests)
        out = []
        for i, req in enumerate(requests):
            gen = req.segment_generated
            proba = est.bucket_proba[i].copy()
            passed = (np.arange(self.n_buckets) + 1) * BUCKET_SIZE <= gen
            passed[-1] = False  # the last bucket is open-ended
            proba[passed] = -1.0
            b = int(np.argmax(proba))
            remaining = max(1.0, bucket_middle(b) - gen)
            call = float(est.call_time[i]) if est.p_call[i] >= 0.5 else None
            ret = float(est.return_len[i]) if call is not None else 0.0
            out.append(Prediction(remaining, call, ret))
        return out

    def save(self, path: str | Path) -> Path:
        return save_learned_predictor(self, path)


_CONTROLLER: Any = None


def single_thread() -> Any:
    """Limit OpenMP/BLAS pools to one thread (the heads are tiny; on a shared
    CPU, thread pools spin and cost far more than they save)."""
    global _CONTROLLER
    if _CONTROLLER is None:
        from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1)


def _positive_proba(model: Any, x: np.ndarray) -> np.ndarray:
    classes = list(model.classes_)
    proba = model.predict_proba(x)
    return proba[:, classes.index(1)] if 1 in classes else np.zeros(len(x))


def _text_features(pred: LearnedPredictor, texts: Sequence[str | None]) -> np.ndarray:
    assert pred.embedder is not None
    pca = pred.heads["pca"]
    dim = int(pred.manifest["features"]["embedding"]["pca_dim"])
    out = np.zeros((len(texts), dim), dtype=np.float32)
    has = [i for i, t in enumerate(texts) if t]
    if has and pca is not None:
        emb = pred.embedder.embed([texts[i] for i in has])
        out[has] = pca.transform(emb).astype(np.float32)
    return out


# --- save / load (format: `store.py`) -------------------------------------------------


def save_learned_predictor(pred: LearnedPredictor, path: str | Path) -> Path:
    return write_model_dir(path, pred.manifest, pred.heads)


def load_learned_predictor(path: str | Path) -> LearnedPredictor:
    """Load a directory written by `save_learned_predictor`; fails naming the path."""
    manifest, heads = read_model_dir(path)
    return LearnedPredictor(manifest, heads)
