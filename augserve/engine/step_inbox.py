"""What reaches the async engine while a step runs on its thread
(`augserve/engine/async_engine.py`): arrivals, aborts and call returns, queued on the
loop and applied to the engine between two steps (the engine is not thread-safe)."""

from __future__ import annotations

from dataclasses import dataclass, field

from augserve.core.prediction import Prediction
from augserve.core.request import Request
from augserve.engine.engine import LLMEngine
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tools import ToolSession


@dataclass(frozen=True)
class Return:
    """A call's result, and the prediction made off the loop for the state after it."""

    request_id: str
    result: list[int] | str
    prediction: Prediction | None
    error: bool


@dataclass(frozen=True)
class Add:
    """A new request, predicted off the loop where its predictor is expensive."""

    req: Request
    params: SamplingParams
    prediction: Prediction | None
    tools: ToolSession | None

    def into(self, engine: LLMEngine) -> None:
        engine.add(self.req, self.params, prediction=self.prediction, tools=self.tools, stream=True)


@dataclass
class StepInbox:
    """Arrivals and aborts that came during a step, and every call return."""

    adds: list[Add] = field(default_factory=list)
    aborts: list[str] = field(default_factory=list)
    returns: list[Return] = field(default_factory=list)

    def has_news(self) -> bool:
        return bool(self.returns or self.adds or self.aborts)

    def drop_add(self, request_id: str) -> bool:
        """Forget a queued arrival (aborted before it reached the engine)."""
        if not any(a.req.request_id == request_id for a in self.adds):
            return False
        self.adds = [a for a in self.adds if a.req.request_id != request_id]
        return True

    def apply(self, engine: LLMEngine) -> None:
        """Arrivals, then aborts, then call returns, in the order each came."""
        adds, self.adds = self.adds, []
        for a in adds:
            a.into(engine)
        aborts, self.aborts = self.aborts, []
        for rid in aborts:
            engine.abort(rid)
        returns, self.returns = self.returns, []
        for r in returns:
            engine.resume(r.request_id, r.result, prediction=r.prediction, error=r.error)
