"""Predictions computed ahead of a simulation, in a few large batches.

The scheduler asks its predictor about one request at a time, on arrival and at
every call return (`Scheduler._apply_prediction`). For the learned predictor
each such call costs milliseconds of fixed scikit-learn overhead, and a long
simulated window makes tens of thousands of them.

In the simulator, though, the state a request is in when it is asked about is
fixed by its plan: at the start of segment `k` it has generated
`max(1, output_len)` tokens in each earlier segment (the simulator's
`step_results`), each earlier call lasted exactly `call_time` and returned
`return_len` tokens, and nothing of segment `k` is generated yet. So
`PrecomputedPredictor` builds every such state up front (`planned_state`),
predicts all distinct ones with the inner predictor in large batches, and then
answers `predict([req])` from a table keyed by `(request_id, segment_index)`.
A request whose live state does not match the planned one (e.g. a generation
cap changed its token counts) falls through to the inner predictor.

Only for predictors that are pure functions of the request state, such as the
learned one: never wrap a predictor that draws random numbers per call (the
noisy oracle), as the order of its draws would change.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from augserve.core.prediction import Prediction, Predictor
from augserve.core.request import CallRecord, Request

__all__ = ["PrecomputedPredictor", "planned_state", "prediction_points", "should_precompute"]


def should_precompute(predictor: Predictor | None) -> bool:
    """Whether the simulator precomputes `predictor` (the learned ones only)."""
    if predictor is None or isinstance(predictor, PrecomputedPredictor):
        return False
    return str(getattr(predictor, "name", "")).startswith("learned")


def prediction_points(req: Request) -> list[int]:
    """Segment indices at which the scheduler asks about `req`: 0 (arrival) and
    one past every segment that ends in a call (its return)."""
    return [0] + [i + 1 for i, seg in enumerate(req.segments) if seg.has_call]


def planned_state(req: Request, k: int) -> Request:
    """`req` as the scheduler holds it at the start of segment `k` in a simulation.

    Token counts, segment index and call records (durations, returned tokens)
    match the live request; timestamps are relative to the arrival (features
    read only durations). The plan (`segments`) is attached, as on the live request.
    """
    if not 0 <= k <= len(req.segments):
        raise ValueError(f"planned_state: segment {k} of a {len(req.segments)}-segment request")
    st = Request(
        request_id=req.request_id,
        arrival_time=req.arrival_time,
        prompt_len=req.prompt_len,
        segments=list(req.segments),
        prompt_text=req.prompt_text,
        kind=req.kind,
        max_tokens=req.max_tokens,
    )
    now = 0.0
    for seg in req.segments[:k]:
        n = max(1, seg.output_len)
        st.num_tokens += n
        st.num_generated_tokens += n
        call_time = seg.call_time or 0.0
        st.calls.append(CallRecord(start=now, end=now + call_time, returned_tokens=seg.return_len))
        now += call_time
        st.num_tokens += seg.return_len
        st.num_returned_tokens += seg.return_len
    st.segment_index = k
    st.segment_generated = 0
    return st


def _signature(req: Request, k: int) -> Hashable:
    """Everything `planned_state(req, k)` depends on except ids and arrival time."""
    return (req.prompt_len, req.prompt_text, req.kind, req.max_tokens, k, tuple(req.segments[:k]))


def _counts(req: Request) -> tuple[int, int, int, int]:
    """What must match between a live and a planned state for a table hit."""
    return (req.segment_generated, req.num_tokens, req.num_generated_tokens, len(req.calls))


class PrecomputedPredictor:
    """`inner`'s predictions for every planned state of `requests`, served from a table.

    Identical planned states (the same trace request resampled into several
    arrivals) are predicted once. `hits` / `misses` count answers from the table
    and from `inner`.
    """

    def __init__(
        self, inner: Predictor, requests: Sequence[Request], batch_size: int = 4096
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.inner = inner
        self.name: str = inner.name
        self.expensive = False  # a table lookup
        self.hits = 0
        self.misses = 0
        uniq: dict[Hashable, int] = {}
        states: list[Request] = []
        keys: dict[tuple[str, int], tuple[int, tuple[int, int, int, int]]] = {}
        for req in requests:
            for k in prediction_points(req):
                sig = _signature(req, k)
                idx = uniq.get(sig)
                state = planned_state(req, k)
                if idx is None:
                    idx = uniq[sig] = len(states)
                    states.append(state)
                keys[(req.request_id, k)] = (idx, _counts(state))
        preds: list[Prediction] = []
        for i in range(0, len(states), batch_size):
            preds.extend(inner.predict(states[i : i + batch_size]))
        if len(preds) != len(states):
            raise RuntimeError(f"{inner.name}: {len(preds)} predictions for {len(states)} states")
        self.num_states = len(states)
        self._table: dict[tuple[str, int], tuple[Prediction, tuple[int, int, int, int]]] = {
            key: (preds[idx], counts) for key, (idx, counts) in keys.items()
        }

    def __len__(self) -> int:
        return len(self._table)

    def lookup(self, req: Request) -> Prediction | None:
        """The precomputed prediction for `req`'s live state, or None."""
        hit = self._table.get((req.request_id, req.segment_index))
        if hit is None or _counts(req) != hit[1]:
            return None
        return hit[0]

    def predict(self, requests: Sequence[Request]) -> list[Prediction]:
        out: list[Prediction | None] = [self.lookup(r) for r in requests]
        missing = [i for i, p in enumerate(out) if p is None]
        self.hits += len(out) - len(missing)
        self.misses += len(missing)
        if missing:
            fresh = self.inner.predict([requests[i] for i in missing])
            for i, p in zip(missing, fresh, strict=True):
                out[i] = p
        return [p for p in out if p is not None]
