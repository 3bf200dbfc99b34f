from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from augserve.core.request import Segment
from augserve.workload.jsonl import read_jsonl, read_jsonl_with_arrivals, write_jsonl
from augserve.workload.trace import Trace, TraceRequest

_text = st.text(max_size=30)
_segment = st.builds(
    Segment,
    output_len=st.integers(0, 10_000),
    call_time=st.none() | st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
    return_len=st.integers(0, 10_000),
    tool=st.none() | _text,
)
_request = st.builds(
    TraceRequest,
    request_id=st.text(min_size=1, max_size=12),
    prompt_len=st.integers(1, 100_000),
    segments=st.lists(_segment, min_size=1, max_size=5).map(tuple),
    prompt_text=st.none() | _text,
    kind=st.none() | _text,
)
_trace = st.lists(_request, min_size=1, max_size=6, unique_by=lambda r: r.request_id)


@settings(max_examples=60, deadline=None)
@given(_trace, st.booleans(), st.data())
def test_round_trip(requests: list[TraceRequest], with_arrivals: bool, data: st.DataObject) -> None:
    arrivals = None
    if with_arrivals:
        arrivals = data.draw(
            st.lists(
                st.floats(0, 1e7, allow_nan=False), min_size=len(requests), max_size=len(requests)
            )
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.jsonl"
        write_jsonl(path, Trace("x", tuple(requests)), arrivals)
        trace, got_arrivals = read_jsonl_with_arrivals(path)
    assert list(trace) == requests
    assert got_arrivals == (arrivals if arrivals is not None else [None] * len(requests))


def test_minimal_line_defaults(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('\n{"request_id": "a", "prompt_len": 3, "segments": [{"output_len": 2}]}\n\n')
    (req,) = read_jsonl(path)
    assert req == TraceRequest("a", 3, (Segment(2),))
    live = req.to_request(1.5)
    assert live.arrival_time == 1.5 and live.segments == [Segment(2)] and live.prompt_len == 3


def test_trace_to_requests_unique_ids() -> None:
    tr = TraceRequest("a", 3, (Segment(2, 1.0, 4, "calc"), Segment(1)), kind="math")
    live = Trace("x", (tr, tr)).to_requests([0.0, 1.0])
    assert [r.request_id for r in live] == ["0-a", "1-a"]
    assert live[1].arrival_time == 1.0 and live[1].segments[0].call_time == 1.0
    assert (tr.num_calls, tr.output_len, tr.returned_len, tr.call_time_total) == (1, 3, 4, 1.0)
