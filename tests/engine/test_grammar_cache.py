"""The compiled-grammar cache (`engine/grammar_cache.py`): an LRU bounded by bytes.
Before it, every distinct schema a client sent stayed compiled for ever (300 small
schemas grew a server by 140 MiB, never freed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from augserve.engine.grammar import GrammarMasker
from augserve.engine.grammar_cache import GrammarCache, grammar_bytes
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

    assert grammar_bytes(Sized(), "x") == 12345
    assert grammar_bytes(object(), "abcd") == 4 * 256


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
