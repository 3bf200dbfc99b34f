"""Grammar-constrained decoding (xgrammar) on a random-weight model: every output is
valid against its schema, constrained rows batch with free ones, forced calls parse
back with the template family's parser, bad schemas are refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from augserve.engine.grammar import GrammarError, call_grammar
from augserve.engine.llm import LLM
from augserve.engine.sampling_params import GrammarSpec, SamplingParams
from augserve.engine.tool_parsers import InvalidCall, make_tool_parser

SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 8},
            "n": {"type": "integer", "minimum": -5, "maximum": 300},
            "ok": {"type": "boolean"},
        },
        "required": ["city", "n", "ok"],
    },
    {
        "type": "object",
        "properties": {
            "unit": {"enum": ["C", "F"]},
            "tags": {"type": "array", "items": {"enum": [1, 2, 3]}, "maxItems": 3},
            "inner": {
                "type": "object",
                "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9}},
                "required": ["x"],
            },
        },
        "required": ["unit", "tags", "inner"],
    },
    {"anyOf": [{"type": "boolean"}, {"type": "string", "maxLength": 4}]},
]


@pytest.fixture(scope="module")
def llm(model_dirs: dict[str, Path]) -> LLM:
    return LLM(model_dirs["llama_gqa"], dtype="fp32", num_device_blocks=256)


def test_outputs_are_schema_valid_and_batch_with_free_rows(llm: LLM) -> None:
    params, prompts = [], []
    for k, schema in enumerate(SCHEMAS):
        spec = GrammarSpec("json_schema", json.dumps(schema))
        for seed in range(3):
            params.append(
                SamplingParams(temperature=1.0, seed=10 * k + seed, max_tokens=120, grammar=spec)
            )
            prompts.append("Answer in JSON:")
    free = SamplingParams(temperature=1.0, seed=99, max_tokens=20, ignore_eos=True)
    outs = llm.generate([*prompts, "The sun"], [*params, free])
    for out, p in zip(outs, params, strict=False):
        assert out.finish_reason == "stop", out.text
        assert p.grammar is not None
        jsonschema.validate(json.loads(out.text), json.loads(p.grammar.source))
    assert outs[-1].num_generated_tokens == 20  # the free row ran alongside, unmasked
    with pytest.raises(json.JSONDecodeError):
        json.loads(outs[-1].text)


def test_json_object_and_greedy(llm: LLM) -> None:
    spec = GrammarSpec("json_object")
    outs = llm.generate(
        ["x", "y"],
        [
            SamplingParams(temperature=0.0, max_tokens=300, grammar=spec),
            SamplingParams(temperature=0.7, seed=4, max_tokens=300, grammar=spec),
        ],
    )
    for out in outs:
        if out.finish_reason == "stop":
            assert isinstance(json.loads(out.text), dict)
        else:  # ran out of tokens inside a string: still a JSON prefix, never other text
            assert out.text.startswith("{")


def test_unconstrained_outputs_are_not_json(llm: LLM) -> None:
    """The control: the same seeds without a grammar give no valid JSON."""
    outs = llm.generate(
        ["Answer in JSON:"] * 3,
        [SamplingParams(temperature=1.0, seed=s, max_tokens=40) for s in range(3)],
    )
    for out in outs:
        with pytest.raises(json.JSONDecodeError):
            json.loads(out.text)


@pytest.mark.parametrize("parser", ["hermes", "llama3_json", "mistral"])
def test_forced_call_grammar_parses_back(llm: LLM, parser: str) -> None:
    num = {"type": "integer", "minimum": 0, "maximum": 99}
    add = {"type": "object", "properties": {"a": num, "b": num}, "required": ["a", "b"]}
    flag = {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"]}
    spec = call_grammar(parser, [("add", add), ("flag", flag)])
    p = make_tool_parser(parser, frozenset({"add", "flag"}))
    outs = llm.generate(
        ["Call a tool"] * 4,
        [SamplingParams(temperature=1.0, seed=s, max_tokens=100, grammar=spec) for s in range(4)],
    )
    names = set()
    for out in outs:
        call = p.parse(out.text, 0)
        assert call is not None and not isinstance(call, InvalidCall), out.text
        jsonschema.validate(call.arguments, add if call.name == "add" else flag)
        names.add(call.name)
        assert p.content(out.text, final=True) == ""  # no markup reaches content


def test_bad_schema_is_refused_and_compiles_are_cached(llm: LLM) -> None:
    g = llm.engine.grammars
    with pytest.raises(GrammarError, match="objectx"):
        g.compile(GrammarSpec("json_schema", '{"type": "objectx"}'))
    with pytest.raises(GrammarError):
        g.compile(GrammarSpec("json_schema", "{not json"))
    spec = GrammarSpec("json_schema", json.dumps(SCHEMAS[0]))
    assert g.compile(spec) is g.compile(GrammarSpec("json_schema", json.dumps(SCHEMAS[0])))


def test_min_tokens_holds_eos_back(llm: LLM) -> None:
    """A +100 bias makes EOS (id 1) certain; min_tokens=5 holds it back for 5 tokens."""
    base = dict(temperature=0.0, max_tokens=20, logit_bias={1: 100.0})
    quick, held = llm.generate(
        ["Hello", "Hello"], [SamplingParams(**base), SamplingParams(**base, min_tokens=5)]
    )  # type: ignore[arg-type]
    assert quick.num_generated_tokens == 1 and quick.finish_reason == "stop"
    assert held.num_generated_tokens == 6 and held.finish_reason == "stop"
    assert 1 not in held.token_ids[:5]
