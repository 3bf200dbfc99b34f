"""What a predictor tells the scheduler about a request's current segment (layer 1 types)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from augserve.core.request import Request


@dataclass(frozen=True, slots=True)
class Prediction:
    output_len: float  # tokens still to generate in the current segment
    call_time: float | None  # duration of the call that ends it; None: no call predicted
    return_len: float = 0.0  # tokens the call returns


class Predictor(Protocol):
    """Predicts the current segment of each request. A predictor whose calls cost
    milliseconds sets `expensive = True`; engines then call it off their loop."""

    name: str
    expensive: bool

    def predict(self, requests: Sequence[Request]) -> list[Prediction]: ...
