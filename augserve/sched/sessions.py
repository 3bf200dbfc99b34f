"""Client sessions: a request that ended with "tool_calls" waits, paused, for its turn.

Most agents run their tools on the client: the request ends with
`finish_reason: "tool_calls"`, the client runs the tool and sends the whole
conversation again with the result. With `SchedulerConfig.session_ttl > 0` the
scheduler keeps such a request as a paused request in a call (its call's tool is
`client_key(tool)`, so the online predictor learns the client's round trip), with
the context policy the normal choice gives it, and this table remembers it.

A new request *continues* a session when it names the session's id
(`Request.session_id`, the client's) or, failing that, when its prompt starts
with the paused request's context (every token whose KV was computed, the last
sampled token excluded); the longest such context wins. The continuation takes
the paused request's KV over (`KVCacheManager.hand_over`), so only its new
tokens are prefilled. Failing both, a prompt that starts with a session's first
prompt is that conversation re-rendered (a chat template may write the call back
differently from how the model wrote it): the session ends and its KV goes to the
prefix cache, where the continuation finds every full block they share.

Tenants: a session is matched only by a request of the same `cache_salt` (the
server's hash of the API key, `sched/prefix_cache.py`): by id or by prompt, one
tenant can neither continue nor end another's session. Client session ids are
names within a tenant.

Retention is soft: a session's device KV is always reclaimable (`KVCacheManager`'s
`soft` set), so admission can take it like any planned Swap / Discard, and a
session expires `session_ttl` seconds after its call began (its KV goes to the
prefix cache). Nothing here reads a clock: time is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from augserve.core.prediction import OnlineLearner
from augserve.core.request import FinishReason, Request, RequestStatus
from augserve.sched.kv_manager import KVCacheManager

Finish = Callable[[Request, FinishReason, float], None]  # the scheduler's `_finish`


class SessionTable:
    """The paused client sessions, by request id and by the client's session id, and
    what happens to them: continued by a new request, expired, kept at a client call."""

    def __init__(self, ttl: float, kv: KVCacheManager, learner: OnlineLearner | None) -> None:
        self.ttl = ttl
        self.kv = kv
        self.learner = learner
        self.requests: dict[str, Request] = {}  # request id -> the paused request
        self.names: dict[tuple[str | None, str], str] = {}  # (salt, client id) -> request id
        self.contexts: dict[str, list[int]] = {}  # request id -> its computed context
        self.prompts: dict[str, list[int]] = {}  # request id -> its first prompt

    def __len__(self) -> int:
        return len(self.requests)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self.requests

    def add(self, req: Request) -> None:
        """`req` just paused at its client call (its context is `token_ids`)."""
        assert req.token_ids is not None
        rid = req.request_id
        self.requests[rid] = req
        self.contexts[rid] = list(req.token_ids[: req.num_tokens - 1])
        self.prompts[rid] = list(req.token_ids[: req.prompt_len])
        if req.session_id is not None:
            self.names[req.cache_salt, req.session_id] = rid  # that session's latest turn

    def remove(self, request_id: str) -> Request | None:
        req = self.requests.pop(request_id, None)
        self.contexts.pop(request_id, None)
        self.prompts.pop(request_id, None)
        if req is not None and req.session_id is not None:
            name = (req.cache_salt, req.session_id)
            if self.names.get(name) == request_id:
                del self.names[name]
        return req

    def match(
        self, session_id: str | None, token_ids: Sequence[int] | None, salt: str | None = None
    ) -> Request | None:
        """The session of tenant `salt` a new request continues: by id, else by the
        longest paused context its prompt extends (strictly: some new token must
        follow), else by the longest first prompt it extends."""
        if session_id is not None and (salt, session_id) in self.names:
            return self.requests[self.names[salt, session_id]]
        if token_ids is None:
            return None
        return self._longest(self.contexts, token_ids, salt) or self._longest(
            self.prompts, token_ids, salt
        )

    def _longest(
        self, keys: dict[str, list[int]], token_ids: Sequence[int], salt: str | None
    ) -> Request | None:
        best: Request | None = None
        best_len = 0
        n = len(token_ids)
        for rid, key in keys.items():
            k = len(key)
            if self.requests[rid].cache_salt != salt:
                continue
            if best_len < k < n and list(token_ids[:k]) == key:
                best, best_len = self.requests[rid], k
        return best

    def keeps(self, req: Request, capacity_tokens: int) -> bool:
        """Whether a request that ended with "tool_calls" is kept as a session."""
        return req.token_ids is not None and req.num_tokens + 1 <= capacity_tokens

    def continue_into(self, req: Request, now: float, finish: Finish) -> None:
        """If `req` continues a paused session (`match`): the client's round trip is
        learned, `req` takes the session's KV over if its prompt extends it (else the
        KV goes to the prefix cache), and the session finishes ("tool_calls", its turn)."""
        old = self.match(req.session_id, req.token_ids, req.cache_salt)
        if old is None:
            return
        status = old.status
        req.num_inherited_tokens = min(old.num_tokens, req.num_tokens)
        if extends(old, req):
            self.kv.hand_over(old, req)
            req.status = status.resumed if req.num_computed_tokens else RequestStatus.WAITING
        finish(old, FinishReason.TOOL_CALLS, now)  # KV not taken over: to the cache
        call = old.calls[-1]
        call.end = now
        call.returned_tokens = max(0, req.num_tokens - old.num_tokens)
        call.policy = status.applied_policy
        if self.learner is not None:
            self.learner.observe_call(old)  # the client's round trip, under client_key

    def expire(self, now: float, finish: Finish) -> None:
        """Abort the sessions whose client has not come back within the TTL."""
        for req in self.expired(now):
            finish(req, FinishReason.ABORT, now)

    def expired(self, now: float) -> list[Request]:
        """Sessions whose client has not come back within the TTL."""
        out = []
        for r in self.requests.values():  # in order of their call's start (`add`): the
            if now - r.calls[-1].start < self.ttl:  # first one still in time ends the scan
                break
            out.append(r)
        return out


def extends(old: Request, new: Request) -> bool:
    """Whether `new`'s prompt starts with every token of `old` whose KV is computed."""
    n = old.num_computed_tokens
    if old.token_ids is None or new.token_ids is None or n >= new.num_tokens:
        return False
    if old.cache_salt != new.cache_salt:  # another tenant's KV: never
        return False
    return new.token_ids[:n] == old.token_ids[:n]
