"""Every number of README.md's results summary listed in docs/data/claims.json is in the
data file it cites, and its text is in the README (or, for a row the README moved to
docs/results.md's superseded runs, in the document its `doc` names).

An entry: `claim` (text that appears in README.md, whitespace-insensitive), `file` (JSON
or CSV under the repository), `field` (where the number is: dot-separated keys or list
indices, `[k=v,...]` for the one list element with those values, `{key}` for a key
holding `.`, ` / ` or ` + `; `A / B` a ratio, `A + B` a sum), `value` (the number as
the README states it), `tolerance` (how far the text may round it) and, optionally, `doc`
(the document holding the text, README.md when absent).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = ROOT / "docs" / "data" / "claims.json"


def _load(path: Path) -> Any:
    if path.suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    return json.loads(path.read_text(encoding="utf-8"))


def _same(cell: Any, want: str) -> bool:
    try:
        return float(cell) == float(want)
    except (TypeError, ValueError):
        return str(cell) == want


def _pick(rows: list[Any], selector: str) -> Any:
    conds = [c.split("=", 1) for c in selector.split(",")]
    hits = [r for r in rows if all(_same(r.get(k), v) for k, v in conds)]
    if len(hits) != 1:
        raise KeyError(f"[{selector}] matches {len(hits)} elements, not 1")
    return hits[0]


def lookup(data: Any, path: str) -> float:
    """The number at `path` (one term: no `/` or `+`)."""
    node = data
    for part in filter(None, re.split(r"\.(?![^\[]*\])(?![^{]*})", path)):
        part = part[1:-1] if part.startswith("{") else part  # {a key with . / + in it}
        if part.startswith("["):
            node = _pick(node, part[1:-1])
        elif isinstance(node, list):
            node = node[int(part)]
        else:
            node = node[part]
    return float(node)


def evaluate(data: Any, field: str) -> float:
    """`A / B`, sums with `+` on either side, or one path."""

    def split(text: str, op: str) -> list[str]:  # not inside a {key}
        return re.split(rf" {re.escape(op)} (?![^{{]*}})", text)

    parts = [sum(lookup(data, t.strip()) for t in split(side, "+")) for side in split(field, "/")]
    if len(parts) > 2:
        raise ValueError(f"{field!r}: at most one '/'")
    return parts[0] / parts[1] if len(parts) == 2 else parts[0]


def _squash(text: str) -> str:
    return " ".join(text.split())


def _claims() -> list[dict[str, Any]]:
    claims: list[dict[str, Any]] = json.loads(CLAIMS.read_text(encoding="utf-8"))["claims"]
    return claims


@pytest.mark.parametrize("claim", _claims(), ids=lambda c: f"{c['file']}:{c['field'][:40]}")
def test_claim_matches_its_data(claim: dict[str, Any]) -> None:
    value = evaluate(_load(ROOT / claim["file"]), claim["field"])
    assert abs(value - claim["value"]) <= claim["tolerance"] + 1e-9, (
        f"{claim['claim']!r}: {claim['file']} {claim['field']} = {value}, "
        f"the README says {claim['value']}"
    )


@pytest.mark.parametrize("claim", _claims(), ids=lambda c: c["claim"][:50])
def test_claim_text_is_in_its_document(claim: dict[str, Any]) -> None:
    doc = ROOT / claim.get("doc", "README.md")
    assert _squash(claim["claim"]) in _squash(doc.read_text(encoding="utf-8"))


def test_the_readme_carries_most_claims() -> None:
    """Moving rows out is for superseded runs: the README keeps the current results."""
    docs = [c.get("doc", "README.md") for c in _claims()]
    assert set(docs) <= {"README.md", "docs/results.md"}
    assert docs.count("README.md") > len(docs) // 2


def test_lookup_reads_selectors_ratios_and_sums() -> None:
    data = {
        "rows": [{"rate": 1.0, "e": "a", "m": {"n": 6}}, {"rate": 2.0, "e": "a", "m": {"n": 3}}]
    }
    assert lookup(data, "rows.[rate=2.0,e=a].m.n") == 3
    assert lookup(data, "rows.0.m.n") == 6
    assert evaluate(data, "rows.[rate=1,e=a].m.n / rows.[rate=2,e=a].m.n") == 2
    assert evaluate(data, "rows.0.m.n + rows.1.m.n") == 9
    assert lookup({"a + b": {"x.y": 2}}, "{a + b}.{x.y}") == 2
    assert evaluate({"a / b": 6, "c": 3}, "{a / b} / c") == 2
    with pytest.raises(KeyError, match="matches 2"):
        lookup(data, "rows.[e=a].m.n")
