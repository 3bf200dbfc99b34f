"""Write `openai_subset.json`: the component schemas of OpenAI's published OpenAPI
description that the conformance test validates against, with every schema they
reference, as one JSON Schema (draft 2020-12) document.

    python tests/server/schemas/vendor_openai_schema.py OPENAPI_JSON COMMIT

OPENAPI_JSON is `openapi.json` of github.com/openai/openai-openapi at COMMIT.
Descriptions, examples and `x-*` keys are dropped; OpenAPI 3.0's `nullable: true`
(the document still mixes it with 3.1's `{"type": "null"}`) becomes an `anyOf` with
null; `#/components/schemas/X` references become `#/$defs/X`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOTS = (
    "CreateChatCompletionResponse",
    "CreateChatCompletionStreamResponse",
    "CreateCompletionResponse",
    "ListModelsResponse",
    "Model",
    "ErrorResponse",
)
DROP = {"description", "example", "examples", "deprecated", "title"}
PREFIX = "#/components/schemas/"


def clean(node: Any, refs: set[str]) -> Any:
    if isinstance(node, list):
        return [clean(x, refs) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROP or key.startswith("x-") or key == "nullable":
            continue
        if key == "$ref":
            name = value.removeprefix(PREFIX)
            refs.add(name)
            out[key] = f"#/$defs/{name}"
        elif key == "properties":
            out[key] = {k: clean(v, refs) for k, v in value.items()}
        else:
            out[key] = clean(value, refs)
    if node.get("nullable") is True:
        return {"anyOf": [out, {"type": "null"}]}
    return out


def subset(schemas: dict[str, Any]) -> dict[str, Any]:
    todo, done = list(ROOTS), {}
    while todo:
        name = todo.pop()
        if name in done:
            continue
        refs: set[str] = set()
        done[name] = clean(schemas[name], refs)
        todo += sorted(refs - set(done))
    return dict(sorted(done.items()))


def main(src: str, commit: str) -> None:
    spec = json.loads(Path(src).read_text())
    doc = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": (
            "Vendored subset of OpenAI's OpenAPI description "
            f"(github.com/openai/openai-openapi, openapi.json at {commit}, "
            f"info.version {spec['info']['version']}, OpenAPI {spec['openapi']}): "
            f"{', '.join(ROOTS)} and what they reference. Written by "
            "tests/server/schemas/vendor_openai_schema.py; do not edit by hand."
        ),
        "$defs": subset(spec["components"]["schemas"]),
    }
    out = Path(__file__).with_name("openai_subset.json")
    out.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(f"wrote {out} ({len(doc['$defs'])} schemas)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
