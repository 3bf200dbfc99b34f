"""Every page the code and the docs send a reader to exists in a clone: each `docs/....md`
named in a docstring, comment or string under augserve/ (or in the README and docs/),
with the `#anchor`, the `section N` or the `, "Heading"` that follows it, resolves to
a file and a heading of that file; and nothing cites the developers' notes, which a
clone does not have (the shared design notes' two file names, below)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = r"docs/[A-Za-z0-9_./-]+?\.md"
REF = re.compile(
    rf"(?P<path>{DOC})`?"
    r"(?:#(?P<anchor>[a-z0-9_-]+)"
    r"|`?,? sections? (?P<section>\d+)"
    r"|`?(?:, | \()\"(?P<heading>[^\"]{3,80})\")?"
)
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)
NOTES = ("PAPER" + ".md", "DESIGN" + ".md")  # spelled apart: this file is scanned too
# The lead renames the code's citations of the notes to docs/paper.md and docs/design.md
# once every branch has merged; until then the code half of the check is skipped.
CODE_CITES_RENAMED = True


def _texts(*globs: str) -> Iterator[tuple[Path, str]]:
    for pattern in globs:
        for path in sorted(ROOT.glob(pattern)):
            if "__pycache__" not in path.parts and path.is_file():
                yield path, path.read_text(errors="replace")


def _code() -> Iterator[tuple[Path, str]]:
    return _texts("augserve/**/*.py", "augserve/**/*.md", "benchmarks/**/*.py")


def _docs() -> Iterator[tuple[Path, str]]:
    return _texts("README.md", "examples/**/*.md", "docs/**/*.md")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_\[\]()]", "", heading.strip().lower())
    return re.sub(r"[^a-z0-9 -]", "", text).replace(" ", "-")


def broken_refs(path: Path, text: str) -> list[str]:
    bad = []
    for m in REF.finditer(text):
        target = ROOT / m["path"]
        where = f"{path.relative_to(ROOT)}: {m.group(0)}"
        if not target.is_file():
            bad.append(where)
            continue
        headings = HEADING.findall(target.read_text())
        if m["anchor"] and m["anchor"] not in {slug(h) for h in headings}:
            bad.append(where)
        if m["section"] and not any(h.startswith(f"{m['section']}.") for h in headings):
            bad.append(where)
        wanted = " ".join((m["heading"] or "").lower().split())  # may wrap across lines
        if wanted and not any(wanted in h.lower() for h in headings):
            bad.append(where)
    return bad


def test_doc_refs_in_the_code_resolve() -> None:
    bad = [b for path, text in _code() for b in broken_refs(path, text)]
    assert not bad, bad


def test_doc_refs_in_the_docs_resolve() -> None:
    bad = [b for path, text in _docs() for b in broken_refs(path, text)]
    assert not bad, bad


def test_the_checker_catches_a_missing_page_section_and_heading() -> None:
    here = ROOT / "augserve" / "x.py"
    assert broken_refs(here, "see docs/no-such-page.md") == ["augserve/x.py: docs/no-such-page.md"]
    assert broken_refs(here, "(docs/paper.md section 9)")
    assert broken_refs(here, 'docs/server.md, "No such heading"')
    assert broken_refs(here, "docs/server.md#no-such-anchor")
    assert not broken_refs(
        here,
        "(docs/paper.md section 3; docs/paper.md#4-dynamic-batch-token-budget-section-54)",
    )


def test_the_docs_cite_no_developer_notes() -> None:
    bad = [f"{p.relative_to(ROOT)}: {n}" for p, text in _docs() for n in NOTES if n in text]
    assert not bad, bad


@pytest.mark.skipif(
    not CODE_CITES_RENAMED,
    reason="the code still cites the developers' notes: the lead's rename to "
    "docs/paper.md / docs/design.md lands after every branch merges (then flip "
    "CODE_CITES_RENAMED)",
)
def test_the_code_cites_no_developer_notes() -> None:
    bad = [
        f"{p.relative_to(ROOT)}: {n}"
        for p, text in [*_code(), *_texts("tests/**/*.py")]
        for n in NOTES
        if n in text
    ]
    assert not bad, bad
