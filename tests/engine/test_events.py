"""The event of a sampled token is decided in one place (`engine/events.py`): a turn
that ends with a client's call names that tool and its arguments' size there (the
engine patched them in afterwards before)."""

from __future__ import annotations

from augserve.core.prediction import client_key
from augserve.core.request import FinishReason, Request, Segment
from augserve.engine.events import decide
from augserve.engine.outputs import SeqState
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tools import ParsedCall
from augserve.sched.output import StepEvent, StepResult


def _scripted_client_call(tool: str) -> SeqState:
    req = Request(
        "r", 0.0, 3, segments=[Segment(1, None, 0, client_key(tool))], token_ids=[1, 2, 3]
    )
    return SeqState(req, SamplingParams(ignore_eos=True), None, True, True, None)


def test_a_client_call_turn_names_its_tool_and_arguments_size() -> None:
    st = _scripted_client_call("lookup")
    result = decide(st, 5, frozenset(), 100)
    assert result == StepResult(5, StepEvent.FINISH, FinishReason.TOOL_CALLS, "lookup", 2)
    assert st.client_calls == [ParsedCall("lookup", {})]
