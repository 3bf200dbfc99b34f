"""`LLM.run_trace`: trace requests with scripted calls through the sync offline loop."""

from __future__ import annotations

import time
from pathlib import Path

from augserve import LLM
from augserve.core.request import Segment
from augserve.engine.make_model import make_model
from augserve.workload.trace import TraceRequest


def test_run_trace_follows_the_plan(tmp_path: Path) -> None:
    path = make_model("opt", "tiny", tmp_path / "m", seed=8)
    llm = LLM(
        path,
        dtype="fp32",
        num_device_blocks=40,
        num_host_blocks=16,
        block_size=4,
        max_batch_tokens=24,
    )
    trace = [
        TraceRequest("calc", 20, (Segment(5, 2.0, 6), Segment(4)), prompt_text="12 times 7"),
        TraceRequest("plain", 9, (Segment(8),)),
        TraceRequest("two", 33, (Segment(2, 1.0, 3), Segment(2, 3.0, 2), Segment(3))),
    ]
    t = time.perf_counter()
    outs = llm.run_trace(trace, arrival_times=[0.0, 1.0, 2.0], time_scale=0.05)
    wall = time.perf_counter() - t
    assert [o.request_id for o in outs] == ["calc", "plain", "two"]
    for out, tr in zip(outs, trace, strict=True):
        req = out.request
        assert out.finished and out.finish_reason == "stop"
        assert req.prompt_len == tr.prompt_len
        assert req.num_generated_tokens == tr.output_len
        assert len(out.token_ids) == tr.output_len + tr.returned_len
        assert len(req.calls) == tr.num_calls
    assert wall >= 0.05 * (2.0 + 1.0 + 3.0) * 0.9  # "two" arrives at 2.0 and waits 4.0 in calls
    assert outs[0].prompt_token_ids[:3] == llm.tokenizer.encode("12 times 7")[:3]
