"""Tenants in the scheduler: a request's `cache_salt` starts its prefix-cache hash
chain (`sched/prefix_cache.py`) and scopes the paused sessions (`sched/sessions.py`).
On the code before salts, tenant B's identical prompt hit A's blocks, and B's
continuation took A's session over."""

from __future__ import annotations

from test_sessions import Client, ids, make

from augserve.core.request import FinishReason, Request


def _add(c: Client, rid: str, tokens: list[int], salt: str | None, sid: str | None = None):
    req = Request(rid, c.now, len(tokens), token_ids=list(tokens), session_id=sid,
                  cache_salt=salt)  # fmt: skip
    c.note(c.sched.add_request(req, c.now))
    return req


def test_the_same_prompt_hits_only_its_own_tenants_blocks():
    sched = make()
    c = Client(sched)
    _add(c, "a0", ids(100), "tenant-a")
    c.run()
    b = _add(c, "b0", ids(100), "tenant-b")
    c.run()
    assert b.num_cached_prompt_tokens == 0
    a = _add(c, "a1", ids(100), "tenant-a")
    c.run()
    assert a.num_cached_prompt_tokens == 96  # its own 6 full blocks


def test_no_salt_keeps_the_shared_chain_of_the_simulator():
    sched = make()
    c = Client(sched)
    _add(c, "x0", ids(100), None)
    c.run()
    y = c.add("x1", ids(100))  # a plain request: no salt, as before
    c.run()
    assert y.num_cached_prompt_tokens == 96
    assert sched.kv.prefix is not None
    hashes = [sched.kv.prefix.block_hash(y, i) for i in range(2)]
    salted = _add(c, "x2", ids(100), "t")
    other = [sched.kv.prefix.block_hash(salted, i) for i in range(2)]
    assert not set(hashes) & set(other)


def test_another_tenant_can_neither_continue_nor_end_a_session():
    sched = make()
    c = Client(sched)
    first = _add(c, "c0", ids(100), "tenant-a", sid="agent")
    c.run()
    assert sched.is_paused("c0") and first.token_ids is not None
    turn = list(first.token_ids) + ids(20, "result")
    other = _add(c, "t1", turn, "tenant-b", sid="agent")  # by id and by prompt
    assert other.num_computed_tokens == 0 and sched.is_paused("c0")
    c.run()
    assert "c0" not in c.finished and sched.stats().num_sessions == 1
    mine = _add(c, "t2", turn, "tenant-a", sid="agent")
    assert c.finished["c0"] is FinishReason.TOOL_CALLS and mine.num_computed_tokens == 103
