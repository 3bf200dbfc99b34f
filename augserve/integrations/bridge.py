"""The engine-independent half of a scheduler plugin: our policy over another engine's queues.

`PolicyBridge` keeps one mirror `augserve.core.request.Request` per engine
request, asks our predictor for it and feeds it to one of our ranking policies
(`augserve.sched.policies`), so the engine's queues are ordered by the same code
our own scheduler runs; nothing here restates a formula. A tool call passes
through the engine one of two ways (docs/vllm-plugin.md, "Context policies"): a
resubmission of the whole context as a new request in the same session (`finish`:
the policy chooses whether the engine holds the ended turn's KV through the call,
`holds.py`; `arrive`: a return, Preserve where the held blocks or the prefix cache
kept the context, else Discard), or a resumable streaming-input session's pause
(`stream_paused`: the policy chooses Preserve or Discard; no per-request Swap). Each
request is costed with the policy that will apply to its calls
(`forced_context_policy`: unforced for a session's turns and resumable requests,
Discard for a request without a session or under `client_sessions="discard"`, or
forced by `augserve_context` or `stream_context="preserve"`). What is predicted and
learned: `predictions.py`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from augserve.core.latency import LatencyModel
from augserve.core.prediction import Predictor
from augserve.core.request import CallRecord, ContextPolicy, Request, Segment
from augserve.integrations.bridge_step import BridgeStep
from augserve.integrations.engine_facts import EngineFacts, plugin_config
from augserve.integrations.options import PluginOptions
from augserve.integrations.pauses import session_hold, unforced_pause_policy
from augserve.integrations.predictions import PluginPredictions
from augserve.integrations.sessions import EndedTurn, EndedTurns, continue_turn
from augserve.predict.base import make_predictor
from augserve.profiles import load_profile
from augserve.sched.policies import RankingPolicy, make_policy, uses_dynamic_budget

PRESERVE, DISCARD = ContextPolicy.PRESERVE, ContextPolicy.DISCARD


class PolicyBridge(BridgeStep):
    """Ranks engine requests with our policy; see the module docstring."""

    def __init__(
        self,
        options: PluginOptions,
        facts: EngineFacts,
        latency: LatencyModel | None = None,
        predictor: Predictor | None = None,
    ) -> None:
        self.options = options
        self.facts = facts
        self.latency = latency if latency is not None else load_profile(options.profile)
        self.config = plugin_config(options, facts)
        self._policies: dict[ContextPolicy | None, RankingPolicy] = {
            p: make_policy(self.config.with_(forced_context_policy=p), self.latency, self)
            for p in (PRESERVE, DISCARD, None)
        }
        self.predictor = predictor or make_predictor(options.predictor, options.seed)
        self.predictions = PluginPredictions(self.predictor)
        self.dynamic = uses_dynamic_budget(self.config)
        self._live: dict[str, Request] = {}
        self._call_policy: dict[str, ContextPolicy | None] = {}  # at its calls; None: choose
        self._pauses: dict[str, int] = {}  # a paused session's context length
        self._base_generated: dict[str, int] = {}  # tokens generated in earlier turns
        self._ended = EndedTurns(options.session_ttl_s, options.max_sessions, self._unanswered)
        self._stream_default = PRESERVE if options.stream_context == "preserve" else None
        self._running_tokens = 0
        self.decisions: deque[dict[str, Any]] = deque(maxlen=options.decision_log or 1)
        self.counts: dict[str, int] = {
            "arrivals": 0, "returns_preserve": 0, "returns_discard": 0,
            "pauses_preserve": 0, "pauses_discard": 0, "holds_preserve": 0, "holds_discard": 0,
            "gated_steps": 0,
        }  # fmt: skip

    # --- LoadView ------------------------------------------------------------------
    def running_tokens(self) -> int:
        return self._running_tokens

    # --- arrivals and returns ------------------------------------------------------
    def arrive(
        self,
        request_id: str,
        num_tokens: int,
        now: float,
        plan: Sequence[Segment] | None = None,
        *,
        session: str | None = None,
        cached_tokens: int = 0,
        resumable: bool = False,
        kind: str | None = None,
        max_tokens: int | None = None,
        hold: ContextPolicy | None = None,
    ) -> Request:
        """A new engine request: a conversation's next turn if `session` ended a turn
        whose context this one extends, else a new request. Without a `plan` the
        predictor plans it; `max_tokens` caps what this turn may generate; `hold` forces
        the context policy of a resumable request's pauses, or of the call after a
        session's turn (else the policy chooses)."""
        if resumable:
            self._call_policy[request_id] = hold or self._stream_default
        elif self.options.client_sessions == "choose" and session:
            self._call_policy[request_id] = hold  # None: the policy chooses (`finish`)
        else:
            self._call_policy[request_id] = DISCARD  # each call frees it: a resubmission
        ended = self._ended.take(session, now)
        if ended is not None and num_tokens >= ended.context_len:
            kept = cached_tokens + self.facts.block_size > ended.context_len
            applied = PRESERVE if kept else DISCARD  # the prefix cache held the context
            self.predictions.segment_ended(ended.mirror, in_call=True)
            rest = ended.mirror.segments[ended.mirror.segment_index + 1 :]
            plan = plan or rest or self.predictions.segments(None, max_tokens)
            mirror = continue_turn(
                ended.mirror, request_id, num_tokens, ended.context_len, ended.end, now, plan
            )
            self._base_generated[request_id] = ended.mirror.num_generated_tokens
            self._cap(mirror, max_tokens)
            self.predictions.call_returned(mirror)
            return self._admit(mirror, now, applied)
        if ended is not None:
            self._unanswered(ended)
        mirror = Request(
            request_id=request_id,
            arrival_time=now,
            prompt_len=num_tokens,
            segments=self.predictions.segments(plan, max_tokens),
            kind=kind,
        )
        self._base_generated[request_id] = 0
        self._cap(mirror, max_tokens)
        return self._admit(mirror, now, None)

    @staticmethod
    def _cap(mirror: Request, max_tokens: int | None) -> None:
        """The mirror's cap on generated tokens: earlier turns' plus this turn's."""
        if max_tokens is not None:
            mirror.max_tokens = mirror.num_generated_tokens + max(1, max_tokens)

    def _unanswered(self, turn: EndedTurn) -> None:
        """An ended turn no resubmission followed: it ended without a call."""
        self.predictions.segment_ended(turn.mirror, in_call=False)

    def resume_stream(
        self,
        request_id: str,
        num_tokens: int,
        num_computed: int,
        now: float,
        plan: Sequence[Segment] | None = None,
    ) -> None:
        """A resumable session got its next input; its KV stayed on device (Preserve) or
        was released at the pause (Discard; `num_computed` is then 0)."""
        old = self._live.pop(request_id, None)
        ctx = self._pauses.pop(request_id, num_computed)
        applied = PRESERVE if num_computed > 0 else DISCARD  # the engine kept its KV or not
        if old is None:
            return
        self._policy(request_id).forget(request_id)
        start = old.calls[-1].start if old.in_call else now
        if old.in_call:
            old.calls.pop()
        self._base_generated[request_id] = old.num_generated_tokens
        mirror = continue_turn(old, request_id, num_tokens, ctx, start, now, plan)
        mirror.max_tokens = old.max_tokens
        self.predictions.call_returned(mirror)
        self._admit(mirror, now, applied)

    def stream_paused(self, request_id: str, now: float, context_len: int) -> ContextPolicy:
        """A resumable session ended a turn with `context_len` tokens of KV and waits for
        input: the context policy of this pause (Discard: the engine releases its KV)."""
        mirror = self._live.get(request_id)
        if mirror is None or mirror.in_call:
            return PRESERVE
        self.predictions.segment_ended(mirror, in_call=True)
        mirror.calls.append(CallRecord(start=now))
        mirror.num_computed_tokens = min(context_len, mirror.num_tokens)
        self.predictions.predict(mirror)  # the call is known now: its duration
        policy = self._pause_policy(mirror, now)
        mirror.calls[-1].policy = mirror.context_policy = policy
        self._pauses[request_id] = context_len
        self.counts[f"pauses_{policy.value}"] += 1
        self._policy(request_id).on_call(mirror, now)
        return policy

    def _pause_policy(self, mirror: Request, now: float) -> ContextPolicy:
        """Forced (`_call_policy`), else `unforced_pause_policy`."""
        forced = self._call_policy.get(mirror.request_id, PRESERVE)
        if forced is not None:
            return forced
        policy = self._policy(mirror.request_id)
        return unforced_pause_policy(policy, mirror, now, self._running_tokens, self.latency)

    def _admit(self, mirror: Request, now: float, applied: ContextPolicy | None) -> Request:
        rid = mirror.request_id
        mirror.last_scheduled_time = now
        self.predictions.predict(mirror)
        policy = self._policy(rid)
        if applied is None:
            policy.on_arrival(mirror, now)
            self.counts["arrivals"] += 1
        else:
            self.counts[f"returns_{applied.value}"] += 1
            mirror.calls[-1].policy = applied
            policy.on_return(mirror, applied, now)
        self._live[rid] = mirror
        return mirror

    # --- ends ------------------------------------------------------------------------
    def finish(
        self,
        request_id: str,
        now: float,
        *,
        num_tokens: int,
        num_output: int,
        session: str | None = None,
        ended_ok: bool = True,
    ) -> float | None:
        """The engine frees the request (`num_tokens` in its context, `num_output` of them
        generated in this turn). A turn that ended normally in a session is kept for its
        resubmission; returns the predicted call time where the engine should hold the
        turn's KV blocks until then (`holds.py`), else None."""
        mirror = self._live.get(request_id)
        if mirror is None:
            return None
        self.sync(request_id, num_tokens, num_tokens, num_output, running=False)
        hold = self._session_hold(mirror, now) if session and ended_ok else None
        del self._live[request_id]
        self._base_generated.pop(request_id, None)
        self._policy(request_id).forget(request_id)
        self._call_policy.pop(request_id, None)
        self._pauses.pop(request_id, None)
        if session and ended_ok:
            self._ended.put(session, mirror, now)  # a call, if its resubmission comes
        elif ended_ok:
            self.predictions.segment_ended(mirror, in_call=False)
        return hold

    def _session_hold(self, mirror: Request, now: float) -> float | None:
        """The predicted call after a session's turn where our policy keeps the turn's KV
        through it, else None (`pauses.session_hold`; asked before the request's policy
        forgets it)."""
        forced = self._call_policy.get(mirror.request_id, DISCARD)
        if forced is DISCARD:
            return None  # no session, `client_sessions="discard"` or `augserve_context`
        self.predictions.predict(mirror)  # the call that follows, if one is predicted
        policy = self._policy(mirror.request_id)
        choice = forced or session_hold(policy, mirror, now, self._running_tokens, self.latency)
        if choice is None:
            return None
        self.counts[f"holds_{choice.value}"] += 1
        return (mirror.pred_call_time or 0.0) if choice is PRESERVE else None

    def has_ended_turn(self, session: str, now: float) -> bool:
        """Whether `session` ended a turn whose resubmission is still expected."""
        return self._ended.has(session, now)

    # --- queries -------------------------------------------------------------------------
    def mirror(self, request_id: str) -> Request | None:
        return self._live.get(request_id)

    def cost(self, request_id: str) -> float | None:
        """AugServe's space-time cost C of the request's segment (None for other policies)."""
        policy = self._policy(request_id)
        getter = getattr(policy, "cost", None)
        return None if getter is None or request_id not in self._live else float(getter(request_id))

    def num_sessions(self) -> int:
        return len(self._ended)
