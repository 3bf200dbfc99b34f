"""The `Predictor` protocol and the oracle predictors (docs/paper.md section 5).

A predictor tells the scheduler, for a request's *current* segment, how many
tokens it will still generate and how long the call that ends it will last.
It is asked on arrival and at every call return.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from augserve.core.prediction import Prediction, Predictor
from augserve.core.request import Request

__all__ = ["NoisyOraclePredictor", "OraclePredictor", "Prediction", "Predictor", "make_predictor"]


class OraclePredictor:
    """True values from the trace (the request's segment plan)."""

    name = "oracle"
    expensive = False

    def predict(self, requests: Sequence[Request]) -> list[Prediction]:
        return [self.predict_one(r) for r in requests]

    @staticmethod
    def predict_one(req: Request) -> Prediction:
        seg = req.current_segment
        if seg is None:
            return Prediction(output_len=1.0, call_time=None)
        remaining = max(1, seg.output_len - req.segment_generated)
        return Prediction(float(remaining), seg.call_time, float(seg.return_len))


class NoisyOraclePredictor:
    """Oracle values times (1 + eps), eps drawn from {-p, +p} (paper section 6.3)."""

    expensive = False

    def __init__(self, p: float, seed: int = 0) -> None:
        if not 0.0 <= p < 1.0:
            raise ValueError(f"noisy predictor: p must be in [0, 1), got {p}")
        self.p = p
        self.name = f"noisy:{p:g}"
        self._rng = random.Random(seed)

    def _noise(self) -> float:
        return 1.0 + (self.p if self._rng.random() < 0.5 else -self.p)

    def predict(self, requests: Sequence[Request]) -> list[Prediction]:
        out = []
        for req in requests:
            true = OraclePredictor.predict_one(req)
            call = None if true.call_time is None else true.call_time * self._noise()
            out.append(Prediction(max(1.0, true.output_len * self._noise()), call, true.return_len))
        return out


def make_predictor(spec: str, seed: int = 0) -> Predictor:
    """`online`, `oracle`, `noisy:P` or `learned:DIR` (the learned one imports its
    extras lazily)."""
    kind, _, arg = spec.partition(":")
    if kind == "online" and not arg:
        from augserve.predict.online import OnlinePredictor

        return OnlinePredictor()
    if kind == "oracle" and not arg:
        return OraclePredictor()
    if kind == "noisy":
        try:
            p = float(arg)
        except ValueError:
            raise ValueError(f"predictor: bad noise level in {spec!r} (want noisy:P)") from None
        return NoisyOraclePredictor(p, seed)
    if kind == "learned" and arg:
        from augserve.predict.learned import load_learned_predictor

        return load_learned_predictor(arg)
    raise ValueError(
        f"predictor: unknown spec {spec!r} (want online, oracle, noisy:P or learned:DIR)"
    )
