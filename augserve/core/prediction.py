"""What a predictor tells the scheduler about a request's current segment (layer 1 types)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

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


def apply_prediction(
    req: Request, prediction: Prediction | None, predictor: Predictor | None
) -> None:
    """Set the request's predicted segment: `prediction`, else the predictor's, else
    one token without a call."""
    if prediction is None and predictor is not None:
        prediction = predictor.predict([req])[0]
    if prediction is None:
        prediction = Prediction(output_len=1.0, call_time=None)
    req.pred_output_len = prediction.output_len
    req.pred_call_time = prediction.call_time
    req.pred_return_len = prediction.return_len


def client_key(tool: str | None) -> str:
    """The tool name a client-side tool's round trip is recorded and learned under
    (`CallRecord.tool` of a paused client session; `predict/online.py`)."""
    return f"client:{tool or '*'}"


@runtime_checkable
class OnlineLearner(Protocol):
    """A predictor that learns from what the scheduler sees (`predict/online.py`). The
    scheduler reports each segment's end and each call's return, and asks for an open
    call's expected duration given how long it has lasted (elapsed time is evidence)."""

    def observe_segment(self, req: Request, ended_in_call: bool) -> None: ...

    def observe_call(self, req: Request) -> None: ...

    def expected_call_time(self, req: Request, now: float) -> float: ...
