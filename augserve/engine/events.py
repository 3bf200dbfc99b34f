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
from augserve.engine.tools import ParsedCall, calls_of, group_calls, scripted_event
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
        return client_turn(st, tok)
    return StepResult(tok, event, FinishReason.STOP)


def finish(st: SeqState, tok: int, reason: FinishReason) -> StepResult:
    """The output ends. With tools, the tolerant parser reads what is left of the
    segment: the turn's client calls, or calls left unclosed / written as bare JSON or
    fences, make it "tool_calls" (server calls run instead, unless the tokens ran out)."""
    tools = st.tools
    if tools is None or st.scripted:
        return StepResult(tok, StepEvent.FINISH, reason)
    if not st.client_calls or (tools.parallel and tools.grammar is None):
        read_end = getattr(tools.parser, "parse_final", tools.parser.parse)  # optional method
        calls = calls_of(read_end(st.text, max(st.segment_start, st.call_scan)))
        server = [c for c in calls if tools.runs_on_server(c.name)]
        client = [c for c in calls if not tools.runs_on_server(c.name)]
        if server and not client and not st.client_calls:
            if reason is FinishReason.LENGTH:
                return StepResult(tok, StepEvent.FINISH, reason)
            return _server_call(st, tok, server)
        _add_client_calls(st, client)
    if st.client_calls:
        return client_turn(st, tok)
    return StepResult(tok, StepEvent.FINISH, reason)


def client_turn(st: SeqState, tok: int) -> StepResult:
    """The turn ends with the client's calls ("tool_calls"). The first names the tool
    (and its arguments' size) whose round trip the paused session learns
    (`sched/sessions.py`): the one place this event is decided."""
    call = st.client_calls[0]
    args_len = len(json.dumps(call.arguments))
    return StepResult(tok, StepEvent.FINISH, FinishReason.TOOL_CALLS, call.name, args_len)


def _add_client_calls(st: SeqState, calls: list[ParsedCall]) -> None:
    """The turn's client calls: all of them with parallel_tool_calls (unless the call
    is forced), else the first."""
    tools = st.tools
    assert tools is not None
    st.client_calls += calls
    if not tools.parallel or tools.grammar is not None:
        del st.client_calls[1:]


def _server_call(st: SeqState, tok: int, calls: list[ParsedCall]) -> StepResult:
    # a forced call's grammar ends with the call; response_format's (if any) follows
    st.matcher, st.after_call = st.after_call, None
    call = group_calls(calls, "".join(c.raw for c in calls))
    assert call is not None
    st.call = call
    return StepResult(tok, StepEvent.CALL, tool=call.name, args_len=len(json.dumps(call.arguments)))


def _scan_past(st: SeqState, call: ParsedCall) -> None:
    """Look for the turn's next call after this one's text."""
    at = st.text.find(call.raw, max(st.segment_start, st.call_scan)) if call.raw else -1
    st.call_scan = at + len(call.raw) if at >= 0 else len(st.text)


def tool_event(st: SeqState, tok: int) -> StepResult:
    """A complete call unit in the current segment: CALL for server tools (a list of
    them runs in one pause); client calls finish the request ("tool_calls"), or, with
    parallel_tool_calls and no forced call, join the turn's calls while the model writes
    on (it may call again). A server call after a client call of the turn is not run:
    the turn goes back to the client."""
    tools = st.tools
    assert tools is not None
    unit = tools.parser.parse(st.text, max(st.segment_start, st.call_scan))
    if unit is None:
        return StepResult(tok)
    calls = calls_of(unit)
    client = [c for c in calls if not tools.runs_on_server(c.name)]
    if not client and not st.client_calls:
        return _server_call(st, tok, list(calls))
    st.matcher, st.after_call = st.after_call, None
    _add_client_calls(st, client)
    if len(client) < len(calls) or not tools.parallel or tools.grammar is not None:
        return client_turn(st, tok)
    _scan_past(st, unit)
    return StepResult(tok)
