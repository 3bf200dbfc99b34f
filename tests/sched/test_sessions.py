"""Client sessions in the scheduler (`sched/sessions.py`): a request that ends with
"tool_calls" stays paused with its KV, softly; its continuation takes the KV over.

Each test would fail on the code before sessions: there the request finishes at
"tool_calls", its blocks are freed, and a continuation is a new request.
"""

from __future__ import annotations

from driver import easy_profile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from augserve.core.config import SchedulerConfig
from augserve.core.prediction import client_key
from augserve.core.request import ContextPolicy, FinishReason, Request, RequestStatus
from augserve.core.token_ids import synthetic_token_ids
from augserve.predict.online import OnlinePredictor
from augserve.sched.invariants import check_invariants
from augserve.sched.output import SchedulerOutput, SchedulerUpdate, StepEvent, StepResult
from augserve.sched.policies import POLICIES
from augserve.sched.scheduler import Scheduler

BS = 16


class Client:
    """Drives a scheduler on virtual time. A request whose id starts with "c" writes
    `out_len` tokens and ends with "tool_calls" (a client tool `search`); any other
    request ends with "stop" after `out_len` tokens."""

    def __init__(self, sched: Scheduler, out_len: int = 4) -> None:
        self.sched = sched
        self.out_len = out_len
        self.now = 0.0
        self.finished: dict[str, FinishReason] = {}
        self.sessions: list[str] = []  # ids that paused as sessions
        self.computed: dict[str, int] = {}  # tokens scheduled per request

    def note(self, upd: SchedulerUpdate) -> None:
        for f in upd.finished:
            assert f.request.request_id not in self.finished, "finished twice"
            self.finished[f.request.request_id] = f.reason
        self.sessions += [r.request_id for r in upd.sessions_paused]
        assert not upd.calls_started  # no server tools here

    def results(self, out: SchedulerOutput) -> dict[str, StepResult]:
        res = {}
        for c in out.chunks:
            self.computed[c.request_id] = self.computed.get(c.request_id, 0) + c.num_tokens
            req = c.request
            if c.sample and req.segment_generated + 1 >= self.out_len:
                client = req.request_id.startswith("c")
                reason = FinishReason.TOOL_CALLS if client else FinishReason.STOP
                tool = "search" if client else None
                res[req.request_id] = StepResult(7, StepEvent.FINISH, reason, tool, 12)
            elif c.sample:
                res[req.request_id] = StepResult(7)
        return res

    def add(self, rid: str, ids: list[int], session_id: str | None = None) -> Request:
        req = Request(rid, self.now, len(ids), token_ids=list(ids), session_id=session_id)
        self.note(self.sched.add_request(req, self.now))
        return req

    def step(self, dt: float = 0.01) -> SchedulerOutput:
        out = self.sched.schedule(self.now)
        self.now += dt
        self.note(self.sched.update_from_output(out, self.results(out), self.now))
        check_invariants(self.sched, out, ())
        table = self.sched.sessions
        assert table is not None
        assert set(table.requests) == set(table.contexts) == set(table.prompts)
        assert all(self.sched.is_paused(rid) for rid in table.requests)
        assert set(table.names.values()) <= set(table.requests)
        return out

    def run(self, max_steps: int = 2000) -> None:
        for _ in range(max_steps):
            if not self.sched.has_runnable():
                return
            self.step()
        raise AssertionError("did not drain")


def make(policy: str = "augserve", blocks: int = 64, host: int = 0, ttl: float = 60.0, **kw):
    config = SchedulerConfig(
        policy=policy, block_size=BS, num_device_blocks=blocks, num_host_blocks=host,
        session_ttl=ttl, enable_prefix_caching=True, **kw,
    )  # fmt: skip
    return Scheduler(config, easy_profile(), OnlinePredictor())


def ids(n: int, key: str = "s") -> list[int]:
    return synthetic_token_ids(key, 0, n)


def test_tool_calls_pause_as_a_session_and_the_continuation_prefills_only_new_tokens():
    sched = make()
    c = Client(sched)
    first = c.add("c0", ids(100))
    c.run()
    assert c.sessions == ["c0"] and "c0" not in c.finished  # paused, not finished
    assert sched.is_paused("c0") and sched.stats().num_sessions == 1
    assert first.status is RequestStatus.PAUSED_PRESERVED and first.block_ids
    assert first.calls[-1].tool == "client:search"
    held = list(first.block_ids)
    # the client's next turn: the whole context so far (100 + 4 generated) and a result
    assert first.token_ids is not None
    c.now += 2.0  # the client's round trip
    nxt = c.add("t1", list(first.token_ids) + ids(30, "result"))
    assert c.finished["c0"] is FinishReason.TOOL_CALLS  # its turn is over: taken over
    assert nxt.block_ids[: len(held)] == held and nxt.num_computed_tokens == 103
    assert nxt.num_cached_prompt_tokens == 103
    c.run()
    # only the new tokens (and the last sampled one), then 3 decode steps
    assert c.computed["t1"] == (134 - 103) + 3
    assert c.finished["t1"] is FinishReason.STOP and sched.stats().num_sessions == 0
    assert first.calls[-1].end is not None
    rt = sched.predictor.calls.predict(client_key("search"), 12)  # type: ignore[union-attr]
    assert 1.0 < rt < 2.1  # learned from the 2.01 s round trip (prior 1 s)


def test_a_continuation_that_does_not_match_starts_fresh():
    sched = make()
    c = Client(sched)
    c.add("c0", ids(100))
    c.run()
    other = c.add("t1", ids(80, "other"))
    assert other.num_computed_tokens == 0 and not other.block_ids
    assert sched.is_paused("c0")  # the session waits on
    c.run()
    assert c.computed["t1"] == 80 + 3 and sched.stats().num_sessions == 1


def test_a_session_id_match_with_a_different_prompt_drops_to_the_prefix_cache():
    sched = make()
    c = Client(sched)
    c.add("c0", ids(100), session_id="agent-1")
    c.run()
    # same session id, the prompt edited after token 70: the KV goes to the cache
    edited = ids(70) + ids(50, "edited")
    nxt = c.add("t1", edited, session_id="agent-1")
    assert c.finished["c0"] is FinishReason.TOOL_CALLS and sched.stats().num_sessions == 0
    c.run()
    assert nxt.num_cached_prompt_tokens == 64  # its 4 full blocks in common, from the cache
    assert c.computed["t1"] == 120 - 64 + 3


def test_a_re_rendered_conversation_ends_the_session_into_the_prefix_cache():
    """The client sent the conversation back with the call written differently: its
    prompt starts with the session's first prompt but not with its whole context."""
    sched = make()
    c = Client(sched)
    c.add("c0", ids(100))
    c.run()
    nxt = c.add("t1", ids(100) + ids(40, "re-rendered call and result"))
    assert c.finished["c0"] is FinishReason.TOOL_CALLS and sched.stats().num_sessions == 0
    c.run()
    assert nxt.num_cached_prompt_tokens == 96  # the first prompt's 6 full blocks


def test_a_session_id_match_takes_over_an_extended_prompt():
    sched = make()
    c = Client(sched)
    a = c.add("c0", ids(100, "a"), session_id="x")
    c.add("c1", ids(100, "b"), session_id="y")
    c.run()
    assert a.token_ids is not None
    nxt = c.add("t1", list(a.token_ids) + ids(10, "r"), session_id="x")
    assert nxt.num_computed_tokens == 103 and sched.is_paused("c1") and not sched.is_paused("c0")


def test_an_expired_session_frees_its_blocks_to_the_prefix_cache():
    sched = make(ttl=5.0)
    c = Client(sched)
    first = c.add("c0", ids(100))
    c.run()
    assert sched.pool.num_free_device < 64
    c.now += 4.0
    c.step()
    assert sched.is_paused("c0")
    c.now += 2.0
    c.step()
    assert c.finished["c0"] is FinishReason.ABORT and not first.block_ids
    assert sched.pool.num_free_device == 64 and sched.pool.device.num_cached_free >= 6
    late = c.add("t1", list(first.token_ids or []) + ids(5, "r"))
    c.run()
    assert late.num_cached_prompt_tokens == 96  # a late continuation still hits the cache


def test_admission_takes_a_preserved_sessions_blocks():
    """A session planned Preserve that holds every device block never blocks a new
    request from being admitted (before sessions were soft it waited for the TTL)."""
    sched = make(blocks=20, forced_context_policy=ContextPolicy.PRESERVE)
    c = Client(sched)
    s = c.add("c0", ids(315))
    c.run()
    assert len(s.block_ids) == 20 and sched.pool.num_free_device == 0
    c.add("t1", ids(100, "new"))
    c.run()
    assert c.finished["t1"] is FinishReason.STOP and c.now < 1.0  # long before the TTL
    assert sched.is_paused("c0") and len(s.block_ids) < 20  # its KV went to the cache


configs = st.fixed_dictionaries(
    {
        "policy": st.sampled_from(sorted(POLICIES)),
        "blocks": st.integers(24, 60),
        "host": st.sampled_from([0, 8]),
        "lazy_eviction": st.booleans(),
        "preserve": st.booleans(),
    }
)
turns = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 200), st.booleans(), st.integers(1, 4)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, turns)
def test_pressure_can_always_reclaim_every_paused_session(cfg, plan):
    """Random sessions (continued or not, by prefix or by id), then a new request that
    needs almost the whole device cache: it is admitted and finishes, every session's
    device KV has been taken, no block leaks, and expiry frees the rest."""
    forced = ContextPolicy.PRESERVE if cfg["preserve"] else None
    sched = make(
        cfg["policy"], cfg["blocks"], cfg["host"], 30.0,
        lazy_eviction=cfg["lazy_eviction"], forced_context_policy=forced,
    )  # fmt: skip
    c = Client(sched, out_len=3)
    last: dict[int, Request] = {}
    for k, (session, new, by_id, steps) in enumerate(plan):
        prev = last.get(session)
        base = list(prev.token_ids or []) if prev is not None else []
        prompt = base + ids(new, f"{session}-{k}")
        if len(prompt) + 8 > cfg["blocks"] * BS:
            prompt = ids(new, f"{session}-{k}")
        last[session] = c.add(f"c{k}", prompt, f"s{session}" if by_id else None)
        for _ in range(steps * 20):
            c.step()
    c.run()
    capacity = cfg["blocks"] * BS
    c.add("big", ids(capacity - BS, "pressure"))
    c.run()
    assert c.finished["big"] is FinishReason.STOP, "pressure could not reclaim the sessions"
    assert sched.sessions is not None
    for r in sched.live_requests():  # only sessions are left, none holds device KV
        assert r.request_id in sched.sessions and not r.block_ids
    c.now += 31.0
    c.step()
    assert sched.num_live == 0 and sched.stats().num_sessions == 0
    assert all(n == 0 for n in sched.pool.device.ref_count)
    assert sched.pool.num_free_device == cfg["blocks"]
    assert sched.pool.num_free_host == cfg["host"]
    assert sorted(c.finished) == sorted([f"c{k}" for k in range(len(plan))] + ["big"])


def test_the_thrash_meter_counts_each_turn_once_and_only_its_new_tokens():
    """A session's turns end segments for the thrash meter (`progress.ThrashMeter`),
    which turns the progress rules on only while preemption throws away more than the
    segments that ended brought. Before, each turn counted its whole context twice (at
    its call and again when the next turn took it over), and the next turn counted that
    context once more: on the server, 300,000 recomputed tokens in 150 s never engaged
    the rules (docs/results-vs-vllm.md, sessions-q1)."""
    sched = make()
    c = Client(sched)
    ended: list[int] = []
    meter = sched.thrash
    orig = meter.segment_ended

    def record(req: Request) -> None:
        before = meter._ended
        orig(req)
        ended.append(meter._ended - before)

    meter.segment_ended = record  # type: ignore[method-assign]
    first = c.add("c0", ids(100))
    c.run()
    assert ended == [104]  # prompt + 4 generated, at its call
    assert first.token_ids is not None
    c.add("t1", list(first.token_ids) + ids(30, "result"))  # 134 tokens, 104 carried over
    c.run()
    assert ended == [104, 134 + 4 - 104]  # c0's finish at the takeover adds nothing
