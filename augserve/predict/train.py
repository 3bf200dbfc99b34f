"""Training the learned predictor (`augserve.predict.learned`): its four heads and the
PCA of the prompt embeddings, fitted on every segment of a trace."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from augserve.predict.embed import MINILM, MiniLMEmbedder
from augserve.predict.features import (
    BUCKET_SIZE,
    FEATURE_VERSION,
    META_NAMES,
    SegmentRow,
    TraceLike,
    bucket_of,
    segment_rows,
)
from augserve.predict.learned import LearnedConfig, LearnedPredictor, single_thread
from augserve.predict.store import FORMAT, FORMAT_VERSION, HEADS


def _boosting_params(cfg: LearnedConfig) -> dict[str, Any]:
    """Hyper-parameters shared by every head (deterministic: no early stopping)."""
    return {
        "max_iter": cfg.max_iter,
        "learning_rate": cfg.learning_rate,
        "max_leaf_nodes": cfg.max_leaf_nodes,
        "min_samples_leaf": cfg.min_samples_leaf,
        "l2_regularization": cfg.l2_regularization,
        "early_stopping": False,
        "random_state": cfg.seed,
    }


def _classifier(cfg: LearnedConfig, y: np.ndarray) -> Any:
    from sklearn.dummy import DummyClassifier  # type: ignore[import-untyped]
    from sklearn.ensemble import HistGradientBoostingClassifier  # type: ignore[import-untyped]

    if len(np.unique(y)) < 2:
        return DummyClassifier(strategy="most_frequent")
    return HistGradientBoostingClassifier(**_boosting_params(cfg))


def _regressor(cfg: LearnedConfig, n: int) -> Any:
    from sklearn.dummy import DummyRegressor
    from sklearn.ensemble import HistGradientBoostingRegressor

    if n < 2 * cfg.min_samples_leaf:
        return DummyRegressor(strategy="mean")
    return HistGradientBoostingRegressor(**_boosting_params(cfg))


def _fit_pca(cfg: LearnedConfig, embedder: MiniLMEmbedder, texts: list[str]) -> Any:
    from sklearn.decomposition import PCA  # type: ignore[import-untyped]

    uniq = sorted(set(texts))
    if len(uniq) < 2:
        return None
    dim = min(cfg.pca_dim, len(uniq) - 1)
    return PCA(n_components=dim, random_state=cfg.seed).fit(embedder.embed(uniq))


def train_learned_predictor(
    trace: Sequence[TraceLike],
    config: LearnedConfig | None = None,
    embedder: MiniLMEmbedder | None = None,
    info: dict[str, Any] | None = None,
) -> LearnedPredictor:
    """Fit the four heads on every segment of `trace` (split by request beforehand)."""
    cfg = config or LearnedConfig()
    rows = list(segment_rows(trace))
    if not rows:
        raise ValueError("learned predictor: the training trace has no segments")
    kinds = sorted({r.kind for r in rows if r.kind}) if cfg.use_kind else None
    texts = [r.request.prompt_text for r in rows if r.request.prompt_text]
    pca = None
    if cfg.embed and texts:
        embedder = embedder or MiniLMEmbedder(max_seq_length=cfg.max_seq_length)
        pca = _fit_pca(cfg, embedder, texts)
    embedding = (
        None
        if pca is None
        else {
            "model": MINILM,
            "dim": MiniLMEmbedder.dim,
            "pca_dim": int(pca.n_components_),
            "input": "prompt_text",
            "max_seq_length": embedder.max_seq_length if embedder else None,
        }
    )
    manifest = _manifest(cfg, kinds, embedding, rows, info or {})
    pred = LearnedPredictor(manifest, {"pca": pca}, embedder if pca is not None else None)
    x = pred.features([r.request for r in rows], [r.kind for r in rows])
    with single_thread():
        _fit_heads(pred, cfg, rows, x)
    return pred


def _fit_heads(
    pred: LearnedPredictor, cfg: LearnedConfig, rows: list[SegmentRow], x: np.ndarray
) -> None:
    y_bucket = np.array([bucket_of(r.output_len, cfg.n_buckets) for r in rows])
    y_call = np.array([int(r.has_call) for r in rows])
    calls = y_call == 1
    y_time = np.array([r.call_time for r in rows])[calls]
    y_ret = np.array([r.return_len for r in rows], dtype=float)[calls]
    pred.heads["bucket"] = _classifier(cfg, y_bucket).fit(x, y_bucket)
    pred.heads["call"] = _classifier(cfg, y_call).fit(x, y_call)
    xc = x[calls] if calls.any() else x[:1]
    pred.heads["call_time"] = _regressor(cfg, len(y_time)).fit(
        xc, y_time if calls.any() else np.zeros(1)
    )
    pred.heads["return_len"] = _regressor(cfg, len(y_ret)).fit(
        xc, y_ret if calls.any() else np.zeros(1)
    )


def _manifest(
    cfg: LearnedConfig,
    kinds: list[str] | None,
    embedding: dict[str, Any] | None,
    rows: list[SegmentRow],
    info: dict[str, Any],
) -> dict[str, Any]:
    import sklearn  # type: ignore[import-untyped]

    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "n_buckets": cfg.n_buckets,
        "bucket_size": BUCKET_SIZE,
        "features": {
            "version": FEATURE_VERSION,
            "meta": list(META_NAMES),
            "kinds": kinds,
            "embedding": embedding,
        },
        "heads": {
            "library": "scikit-learn",
            "version": sklearn.__version__,
            "file": HEADS,
            "sha256": None,
        },
        "config": asdict(cfg),
        "training": {
            "segments": len(rows),
            "requests": len({r.request.request_id for r in rows}),
            **info,
        },
    }
