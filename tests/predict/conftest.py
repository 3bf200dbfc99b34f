"""Fixtures of the learned-predictor tests."""

from __future__ import annotations

import pytest
from predict_planted import planted_trace


@pytest.fixture(scope="session")
def planted_model():
    from augserve.predict.learned import LearnedConfig
    from augserve.predict.train import train_learned_predictor

    cfg = LearnedConfig(embed=False, max_iter=40, learning_rate=0.2)
    return train_learned_predictor(planted_trace(150, seed=1), cfg)
