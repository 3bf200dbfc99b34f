"""The committed BFCL runs (docs/bfcl.md): every field the tables are read from,
augserve's accuracy within 2 points of the reference in every category (or the
difference explained item by item in the file), verdicts equal entry by entry (or
explained), and the completions path's texts equal to the reference's (or explained).

- `smollm2-limit3-fp32.json`: the seven single-turn categories, 3 entries each;
- `smollm2-limit3-fp32-8cat.json`: all eight, multi_turn_base included, 3 entries each.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DIR = Path(__file__).resolve().parents[1] / "docs" / "data" / "bfcl"
PATHS = ("augserve_chat", "augserve_completions", "reference")
EIGHT = (
    "simple",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
    "live_simple",
    "live_multiple",
    "multi_turn_base",
)
# file -> (categories, entries per category)
RUNS = {
    "smollm2-limit3-fp32.json": (EIGHT[:7], 3),
    "smollm2-limit3-fp32-8cat.json": (EIGHT, 3),
}


def load(name: str) -> dict:
    return json.loads((DIR / name).read_text())


def explained(data: dict, key: str) -> bool:
    """Whether the file explains `key` (a category or an entry id) in words."""
    text = data.get("explanations", {}).get(key, "")
    return isinstance(text, str) and len(text) > 40


@pytest.mark.parametrize("name", RUNS)
def test_the_run_says_how_it_was_made(name: str) -> None:
    data = load(name)
    for field in ("command", "commit", "date", "load_average", "cpu_flags", "model"):
        assert data[field], field
    assert "busy" in data["note"] and "float32" in data["note"]
    assert data["max_tokens_per_turn"] == 128
    assert "--dtype" not in data["command"] or "--dtype float32" in data["command"]


@pytest.mark.parametrize("name", RUNS)
def test_augserve_within_two_points_of_the_reference_in_every_category(name: str) -> None:
    data = load(name)
    cats = data["categories"]
    names, n = RUNS[name]
    assert tuple(cats) == names
    for cat, row in cats.items():
        assert row["n"] == n, cat
        for path in PATHS:
            assert row["n_scored"][path] == row["n"], (cat, path)
            assert 0.0 <= row[path] <= 100.0, (cat, path)
        for path in ("augserve_chat", "augserve_completions"):
            if abs(row[path] - row["reference"]) > 2.0:
                assert explained(data, cat), (cat, path, row)


@pytest.mark.parametrize("name", RUNS)
def test_verdicts_and_texts_agree_entry_by_entry(name: str) -> None:
    data = load(name)
    names, n = RUNS[name]
    per = data["per_entry"]
    ids = {c: set(v) for c, v in per["reference"].items()}
    assert set(ids) == set(names) and all(len(v) == n for v in ids.values())
    for path in PATHS:
        assert set(per[path]) == set(ids), path
        for cat, table in per[path].items():
            assert set(table) == ids[cat], (path, cat)
            for i, ok in table.items():
                if ok != per["reference"][cat][i]:
                    assert explained(data, i), (path, cat, i)
    # a disagreement is an entry whose verdicts differ between the paths
    for cat, listed in data["disagreements"].items():
        differ = {i for i in ids[cat] if len({per[p][cat][i] for p in PATHS}) > 1}
        assert set(listed) == differ, cat
        assert all(explained(data, i) for i in listed), cat
    texts = data["completions_vs_reference_text"]
    assert len(texts) == sum(len(v) for v in ids.values()) == len(names) * n
    for i, part in texts.items():
        assert part is None or explained(data, i), (i, part)


def test_the_eight_category_run_covers_multi_turn() -> None:
    """multi_turn_base went through BFCL's multi-turn loop on every path: its generation
    is recorded with the machine's load, and its entries are conversations."""
    data = load("smollm2-limit3-fp32-8cat.json")
    assert "multi_turn_base" in data["categories"]
    assert all(
        i.startswith("multi_turn_base_") for i in data["per_entry"]["reference"]["multi_turn_base"]
    )
    gen = data["generation"]
    assert gen["wall_s"] > 0 and gen["load_1min_samples"]
    assert gen["load_1min"]["min"] <= gen["load_1min"]["mean"] <= gen["load_1min"]["max"]
    assert data["niceness"] == 19
    assert len(data["commit"]) == 40 and data["commit_note"]
    shape = data["multi_turn"]
    ids = set(data["per_entry"]["reference"]["multi_turn_base"])
    for path in PATHS:
        assert set(shape[path]) == ids, path
        for i, entry in shape[path].items():
            assert len(entry["steps_per_turn"]) >= 2, (path, i)  # a conversation
            assert all(1 <= n <= 21 for n in entry["steps_per_turn"]), (path, i)  # BFCL's cap
            assert len(entry["prompt_tokens"]) == sum(entry["steps_per_turn"]), (path, i)
    # the same prompts on the completions path and the reference: the same turns, steps
    # and prompt token counts (each server's own count), and the same reason to fail
    assert shape["augserve_completions"] == shape["reference"]
    reasons = data["failure_reasons"]
    assert reasons["augserve_completions"] == reasons["reference"]
    failed = {i for c in data["per_entry"]["reference"].values() for i, ok in c.items() if not ok}
    assert set(reasons["reference"]) == failed
