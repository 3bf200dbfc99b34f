"""No link in the README or docs/ leads outside the repository or to a missing file:
markdown links resolve from their file, and no text points above the repository
(`../shared/...` exists on the developers' machine, not in a clone)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
UP = re.compile(r"`\.\./[^`]*`")


def _docs() -> list[Path]:
    return [ROOT / "README.md", ROOT / "examples" / "README.md", *ROOT.glob("docs/**/*.md")]


def test_links_resolve_inside_the_repository() -> None:
    bad = []
    for doc in _docs():
        text = doc.read_text()
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # a web address, or an anchor on the page
            path = (doc.parent / target.split("#")[0]).resolve()
            if not path.exists() or ROOT not in path.parents:
                bad.append(f"{doc.relative_to(ROOT)}: {target}")
        bad += [f"{doc.relative_to(ROOT)}: {m}" for m in UP.findall(text)]
    assert not bad, bad
