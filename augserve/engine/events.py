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
from augserve.engine.tools import ParsedCall, scripted_event
from augserve.sched.output import StepEvent, StepResult

CLIENT_PREFIX = "client:"  # `core.prediction.client_key`'s: a scripted client tool's name


def decide(st: SeqState, tok: int, eos_ids: Collection[int], max_model_len: int) -> StepResult:
    """The event token `tok` causes (it joins `st`'s generated text here)."""
    req, p = st.request, st.params
    if tok in p.stop_token_ids or (not p.ignore_eos and tok in eos_ids):
        st.add_generated(tok, decode=False)  # a stop token is not part of the text
        return finish(st, tok, FinishReason.STOP)
    old = len(st.text)
    st.add_generated(tok)
    if p.stop and len(st.text) > old and len(st.gen_ids) >= p.min_tokens:
        longest = max(len(s) for s in p.stop)
        idx = check_stop(st.text, p.stop, max(st.segment_start, old - longest + 1))
        if idx is not None:
            st.cut_text(idx)
            return finish(st, tok, FinishReason.STOP)
    if req.num_tokens + 1 >= max_model_len:
        return finish(st, tok, FinishReason.LENGTH)
    if st.scripted:
        return _scripted(st, tok)
    if st.tools is not None:
        result = tool_event(st, tok)
        last = req.max_tokens is not None and req.num_generated_tokens + 1 >= req.max_tokens
        if result.event is StepEvent.NONE and last:  # cut short: read what was written
            return finish(st, tok, FinishReason.LENGTH)
        return result
    return StepResult(tok)


def _scripted(st: SeqState, tok: int) -> StepResult:
    """A scripted request follows its plan; a last segment whose tool is a client's
    (`client_key(name)`) ends it with a call of that client tool ("tool_calls")."""
    event, seg = scripted_event(st.request), st.request.current_segment
    tool = seg.tool if seg is not None and not seg.has_call else None
    if event is StepEvent.FINISH and tool is not None and tool.startswith(CLIENT_PREFIX):
        st.client_calls = [ParsedCall(tool[len(CLIENT_PREFIX) :], {})]
        return StepResult(tok, StepEvent.FINISH, FinishReason.TOOL_CALLS)
    return StepResult(tok, event, FinishReason.STOP)


def finish(st: SeqState, tok: int, reason: FinishReason) -> StepResult:
    """The output ends. With tools, the tolerant parser reads its end: the turn's
    client calls, or a call left unclosed / written as bare JSON or a fence, make it
    "tool_calls" (a server tool's call runs instead, unless the tokens ran out)."""
    tools = st.tools
    if tools is None or st.scripted:
        return StepResult(tok, StepEvent.FINISH, reason)
    if not st.client_calls:
        read_end = getattr(tools.parser, "parse_final", tools.parser.parse)  # optional method
        call = read_end(st.text, max(st.segment_start, st.call_scan))
        if call is not None and tools.runs_on_server(call.name):
            if reason is FinishReason.LENGTH:
                return StepResult(tok, StepEvent.FINISH, reason)
            return _server_call(st, tok, call)
        if call is not None:
            st.client_calls = [call]
    if st.client_calls:
        return StepResult(tok, StepEvent.FINISH, FinishReason.TOOL_CALLS)
    return StepResult(tok, StepEvent.FINISH, reason)


def _server_call(st: SeqState, tok: int, call: ParsedCall) -> StepResult:
    # a forced call's grammar ends with the call; response_format's (if any) follows
    st.matcher, st.after_call = st.after_call, None
    st.call = call
    return StepResult(tok, StepEvent.CALL, tool=call.name, args_len=len(json.dumps(call.arguments)))


def tool_event(st: SeqState, tok: int) -> StepResult:
    """A complete call in the current segment: CALL for a server tool; a client tool's
    call finishes the request ("tool_calls"), or, with parallel_tool_calls and no forced
    call, joins the turn's calls while the model writes on (it may call again)."""
    tools = st.tools
    assert tools is not None
    call = tools.parser.parse(st.text, max(st.segment_start, st.call_scan))
    if call is None:
        return StepResult(tok)
    if tools.runs_on_server(call.name):
        if st.client_calls:  # the turn goes back to the client: it cannot pause here
            return StepResult(tok, StepEvent.FINISH, FinishReason.TOOL_CALLS)
        return _server_call(st, tok, call)
    st.matcher, st.after_call = st.after_call, None
    st.client_calls.append(call)
    if tools.parallel and tools.grammar is None:
        st.call_scan = len(st.text)  # look for the next call after this one
        return StepResult(tok)
    return StepResult(tok, StepEvent.FINISH, FinishReason.TOOL_CALLS)
