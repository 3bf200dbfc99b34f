"""The committed BFCL run (docs/bfcl.md): every field the table is read from, augserve's
accuracy within 2 points of the reference in every category, verdicts equal entry by
entry, and the completions path's texts equal to the reference's."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "docs" / "data" / "bfcl" / "smollm2-limit3-fp32.json"
PATHS = ("augserve_chat", "augserve_completions", "reference")


def load() -> dict:
    return json.loads(DATA.read_text())


def test_the_run_says_how_it_was_made() -> None:
    data = load()
    for field in ("command", "commit", "date", "load_average", "cpu_flags", "model"):
        assert data[field], field
    assert "busy" in data["note"] and "float32" in data["note"]


def test_augserve_within_two_points_of_the_reference_in_every_category() -> None:
    cats = load()["categories"]
    assert len(cats) == 7
    for name, row in cats.items():
        assert row["n"] >= 3, name
        for path in PATHS:
            assert row["n_scored"][path] == row["n"], (name, path)
        for path in ("augserve_chat", "augserve_completions"):
            assert abs(row[path] - row["reference"]) <= 2.0, (name, path, row)


def test_verdicts_and_texts_agree_entry_by_entry() -> None:
    data = load()
    per = data["per_entry"]
    ids = {c: set(v) for c, v in per["reference"].items()}
    for path in PATHS:
        for cat, table in per[path].items():
            assert set(table) == ids[cat], (path, cat)
            for i, ok in table.items():
                assert ok == per["reference"][cat][i], (path, cat, i)
    assert all(not v for v in data["disagreements"].values())
    texts = data["completions_vs_reference_text"]
    assert len(texts) == sum(len(v) for v in ids.values()) == 21
    assert all(v is None for v in texts.values())
