"""When a request can no longer meet its SLO (docs/paper.md section 7), as the scheduler sees it.

The SLO is the metrics' own `augserve.core.metrics.SLOConfig`: TTFT < `ttft_slo`
seconds and normalized latency (latency outside calls per generated token) <
`norm_latency_slo` seconds per token, by default `NORM_FACTOR` (10) x the profile's
decode iteration at batch 1 (`SLOConfig.from_iteration_time`).

A request's *deadline* is the time after which, if it got no service until
then, it would miss its SLO even if served alone from then on. It is a pure
function of the request's state and its prediction: while a request waits
(nothing about it changes) its deadline stays put, so a queue can file a
waiting request under its deadline and the ranking key recomputed later
agrees with it.

- No first token yet: arrival + ttft - tau_fwd(tokens still to prefill).
- First token late: -inf (lost for good).
- Otherwise, with `norm`: arrival + call time so far + norm_latency x G -
  (time to finish the segment alone: its prefill, then one decode iteration at
  batch 1 per token). G, the generated tokens the latency will be divided by,
  is those so far plus the predicted rest of the segment, plus `ahead` times
  that rest when the segment is predicted to end in a call (the predictor sees
  one segment; later segments add tokens, and so slack). Without `norm`
  a request with its first token in time is never lost (+inf).
"""

from __future__ import annotations

import math

from augserve.core.latency import LatencyModel
from augserve.core.metrics import SLOConfig
from augserve.core.request import Request


def predicted_left(req: Request) -> float:
    """Tokens still to generate in the current segment, by the prediction (>= 1)."""
    left = req.pred_output_len - req.segment_generated
    return left if left > 1.0 else 1.0


def slo_deadline(
    req: Request, target: SLOConfig, latency: LatencyModel, norm: bool, ahead: float = 0.0
) -> float:
    """The last time the request can get service and still meet its SLO."""
    first = req.first_token_time
    if first is None:
        return req.arrival_time + target.ttft_slo - latency.prefill_time(req.num_tokens_to_compute)
    if first - req.arrival_time >= target.ttft_slo:
        return -math.inf
    if not norm:
        return math.inf
    left = predicted_left(req)
    tokens = req.num_generated_tokens + left
    if req.pred_call_time is not None:
        tokens += ahead * left
    alone = latency.prefill_time(req.num_tokens_to_compute) + left * latency.decode_iter_time()
    return req.arrival_time + req.call_time_total + target.norm_latency_slo * tokens - alone
