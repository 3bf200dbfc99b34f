"""What the plugin predicts for an engine request, and what its predictor learns from the engine.

The default predictor is `online` (`augserve/predict/online.py`, the same one
our server runs): it reads nothing a real request does not carry and learns
from what the engine shows the scheduler, which is less than our own engine
shows (the engine's scheduler sees token counts, never the parsed tool call):

- a turn's output length, when the engine frees it: with no session, the
  request is over (a segment that ended without a call); in a session, the
  answer waits until the session's next turn comes (the segment ended in a
  call: the client ran a tool and resubmitted) or the remembered turn is
  dropped unanswered (it ended the conversation);
- a call's duration: the gap between the end of a session's turn and the
  arrival of its resubmission (the client's round trip), and its returned
  tokens: what the resubmission adds past the ended turn's context;
- a resumable streaming session's pause and its next input, the same way.

The tool is not known, so calls are learned under the request's kind
(`augserve_kind`, else all requests together). A client's plan
(`augserve_plan`) is read only by the oracle predictors, which without one
take `max_tokens` as the output (`plan.max_tokens_plan`). Every prediction is
capped by what the turn may still generate (its `max_tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence

from augserve.core.prediction import OnlineLearner, Predictor
from augserve.core.request import Request, Segment
from augserve.integrations.plan import max_tokens_plan
from augserve.predict.base import NoisyOraclePredictor, OraclePredictor


class PluginPredictions:
    """Plans, predicts and feeds back for `PolicyBridge` (see the module docstring)."""

    def __init__(self, predictor: Predictor) -> None:
        self.predictor = predictor
        self.learner = predictor if isinstance(predictor, OnlineLearner) else None
        self.reads_plan = isinstance(predictor, OraclePredictor | NoisyOraclePredictor)
        self.counts = {"segments": 0, "calls": 0}

    def segments(self, plan: Sequence[Segment] | None, max_tokens: int | None) -> list[Segment]:
        """The mirror's segments: the client's plan, else what an oracle would read
        (`max_tokens`), else none (a predictor that never reads them)."""
        if plan:
            return list(plan)
        return max_tokens_plan(max_tokens) if self.reads_plan else []

    def predict(self, mirror: Request) -> None:
        """Set the mirror's predicted segment, capped by its `max_tokens`."""
        pred = self.predictor.predict([mirror])[0]
        out = pred.output_len
        if mirror.max_tokens is not None:
            left = mirror.max_tokens - mirror.num_generated_tokens
            out = max(1.0, min(out, float(left)))
        mirror.pred_output_len = out
        mirror.pred_call_time = pred.call_time
        mirror.pred_return_len = pred.return_len

    def segment_ended(self, mirror: Request, in_call: bool) -> None:
        """The mirror's current segment ended (`in_call`: a call, i.e. a next turn, follows)."""
        if self.learner is not None:
            self.learner.observe_segment(mirror, in_call)
            self.counts["segments"] += 1

    def call_returned(self, mirror: Request) -> None:
        """The mirror's last call has returned (its record has `end` and returned tokens)."""
        if self.learner is not None and mirror.calls and mirror.calls[-1].end is not None:
            self.learner.observe_call(mirror)
            self.counts["calls"] += 1
