"""What a sampled token does to its request: nothing, finish it, or start a call.

The engine decides; the scheduler applies the decision (`StepResult`). Stop
tokens and EOS (unless `ignore_eos`), stop strings and the model's length
finish the request; a scripted request follows its segment plan; a request
with a `ToolSession` starts a call when its parser finds one (a server tool
pauses it, a client tool finishes it with "tool_calls").
"""

from __future__ import annotations

import json
from collections.abc import Collection

from augserve.core.request import FinishReason
from augserve.engine.outputs import SeqState
from augserve.engine.sampling_params import check_stop
from augserve.engine.tools import scripted_event
from augserve.sched.output import StepEvent, StepResult


def decide(st: SeqState, tok: int, eos_ids: Collection[int], max_model_len: int) -> StepResult:
    """The event token `tok` causes (it joins `st`'s generated text here)."""
    req, p = st.request, st.params
    if tok in p.stop_token_ids or (not p.ignore_eos and tok in eos_ids):
        st.add_generated(tok, decode=False)  # a stop token is not part of the text
        return StepResult(tok, StepEvent.FINISH, FinishReason.STOP)
    old = len(st.text)
    st.add_generated(tok)
    if p.stop and len(st.text) > old:
        longest = max(len(s) for s in p.stop)
        idx = check_stop(st.text, p.stop, max(st.segment_start, old - longest + 1))
        if idx is not None:
            st.cut_text(idx)
            return StepResult(tok, StepEvent.FINISH, FinishReason.STOP)
    if req.num_tokens + 1 >= max_model_len:
        return StepResult(tok, StepEvent.FINISH, FinishReason.LENGTH)
    if st.scripted:
        return StepResult(tok, scripted_event(req), FinishReason.STOP)
    if st.tools is not None:
        return tool_event(st, tok)
    return StepResult(tok)


def tool_event(st: SeqState, tok: int) -> StepResult:
    """A complete call in the current segment: CALL for a server tool, else FINISH."""
    assert st.tools is not None
    call = st.tools.parser.parse(st.text, st.segment_start)
    if call is None:
        return StepResult(tok)
    if st.tools.runs_on_server(call.name):
        st.call = call
        args_len = len(json.dumps(call.arguments))
        return StepResult(tok, StepEvent.CALL, tool=call.name, args_len=args_len)
    st.client_calls = [call]
    return StepResult(tok, StepEvent.FINISH, FinishReason.TOOL_CALLS)
