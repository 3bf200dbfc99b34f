"""The compiled-grammar cache (`engine/grammar_cache.py`): an LRU bounded by bytes.
Before it, every distinct schema a client sent stayed compiled for ever (300 small
schemas grew a server by 140 MiB, never freed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from augserve.engine.grammar import GrammarMasker
from augserve.engine.grammar_cache import ENTRY_OVERHEAD_BYTES, GrammarCache, grammar_bytes
from augserve.engine.sampling_params import GrammarSpec
from augserve.engine.tokenizer import Tokenizer


def test_the_least_recently_used_goes_first_and_the_bytes_stay_bounded() -> None:
    cache: GrammarCache[str] = GrammarCache(max_bytes=100)
    for key in "abc":
        cache.put(key, key.upper(), 40)  # c pushes a out: 80 bytes
    assert cache.get("a") is None and cache.get("b") == "B" and cache.bytes == 80
    cache.put("d", "D", 40)  # b was used after c: c goes
    assert cache.get("c") is None and cache.get("b") == "B" and cache.get("d") == "D"
    cache.put("huge", "H", 101)  # larger than the bound: not kept, nothing dropped
    assert cache.get("huge") is None and len(cache) == 2 and cache.evictions == 2
    cache.put("b", "B2", 10)  # replacing an entry counts its new size only
    assert cache.bytes == 50 and cache.get("b") == "B2"
    with pytest.raises(ValueError, match="max_bytes"):
        GrammarCache(max_bytes=-1)


def test_a_grammars_size_is_xgrammars_figure_or_an_estimate() -> None:
    class Sized:
        memory_size_bytes = 12345

    assert grammar_bytes(Sized(), "x") == 12345 + ENTRY_OVERHEAD_BYTES
    assert grammar_bytes(object(), "abcd") == 4 * 256 + ENTRY_OVERHEAD_BYTES


def test_300_distinct_schemas_keep_the_compiled_grammars_within_the_bound(
    model_dirs: dict[str, Path],
) -> None:
    tok = Tokenizer(model_dirs["llama_gqa"])
    masker = GrammarMasker(tok.backend, tok.vocab_size, [1])
    one = masker.compile(GrammarSpec("json_schema", json.dumps({"type": "integer"})))
    bound = 20 * grammar_bytes(one)
    masker.cache.max_bytes = bound
    for i in range(300):
        schema = {"type": "object", "properties": {f"field_{i}": {"type": "integer"}}}
        masker.compile(GrammarSpec("json_schema", json.dumps(schema)))
        assert masker.cache.bytes <= bound
    assert masker.cache.evictions > 0 and len(masker.cache) < 300
    last = GrammarSpec("json_schema", json.dumps(schema))
    assert masker.cache.get(last) is not None  # the most recent is kept
    # a spec that carries its compiled grammar needs no cache at all
    carried = GrammarSpec("json_schema", "{}", compiled=one)
    assert masker.compile(carried) is one and carried == GrammarSpec("json_schema", "{}")


def test_an_engines_cache_bytes_are_zero_before_its_masker_is_built() -> None:
    from types import SimpleNamespace

    from augserve.engine.grammar_cache import engine_cache_bytes

    assert engine_cache_bytes(SimpleNamespace()) == 0  # no masker at all
    assert engine_cache_bytes(SimpleNamespace(masker=SimpleNamespace(built=None))) == 0
    cache = GrammarCache[str](max_bytes=1000)
    cache.put("a", object(), 300)
    engine = SimpleNamespace(masker=SimpleNamespace(built=SimpleNamespace(cache=cache)))
    assert engine_cache_bytes(engine) == 300


def _heap_bytes() -> int | None:
    """glibc's heap in use (small blocks + mmapped), None where not glibc >= 2.33."""
    import ctypes

    class Info(ctypes.Structure):
        names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
        _fields_ = [(n, ctypes.c_size_t) for n in names.split()]

    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = Info
    info = fn()
    return int(info.uordblks + info.hblkhd)


def test_the_heap_stops_growing_at_the_bound_and_the_bound_counts_it(
    model_dirs: dict[str, Path],
) -> None:
    """The soak's distinct schemas: the heap grows with the cache up to its bound (by no
    more than the cache says it holds), then stays put while entries are evicted."""
    if _heap_bytes() is None:
        pytest.skip("needs glibc's mallinfo2 (glibc >= 2.33)")
    tok = Tokenizer(model_dirs["llama_gqa"])
    masker = GrammarMasker(tok.backend, tok.vocab_size, [1])
    one = masker.compile(GrammarSpec("json_schema", json.dumps({"type": "integer"})))
    per_entry = grammar_bytes(one)
    masker.cache.max_bytes = 60 * per_entry

    def compile_distinct(first: int, count: int) -> None:
        for i in range(first, first + count):
            schema = {"type": "object", "properties": {f"field_{i}": {"type": "integer"}}}
            masker.compile(GrammarSpec("json_schema", json.dumps(schema)))

    start = _heap_bytes()
    compile_distinct(0, 150)  # past the bound: the cache is full
    full = _heap_bytes()
    assert start is not None and full is not None and masker.cache.evictions > 0
    assert full - start <= masker.cache.bytes  # the bound counts what the heap holds
    compile_distinct(150, 300)  # 300 more, each evicting one
    end = _heap_bytes()
    assert end is not None and masker.cache.evictions >= 300
    assert end - full < 30 * per_entry  # a leak of a tenth of each entry would fail
