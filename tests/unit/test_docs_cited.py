"""The code cites only documents in the repository: every document under docs it names (and a doc's relative
link) it names exists, and nothing points at the documents the project started from outside it."""

from __future__ import annotations

import re
import subprocess

from conftest import ROOT

CITED = re.compile(r"docs/([\w.-]+\.(?:md|json))")
OUTSIDE = "../shared/" + "docs"  # split: this file must not match itself


def _tracked() -> list:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / p for p in out.split() if p.endswith((".py", ".rs", ".md", ".toml", ".j2", ".sh"))]


def test_no_file_refers_to_documents_outside_the_repository():
    assert [p.relative_to(ROOT) for p in _tracked() if p.is_file() and OUTSIDE in p.read_text()] == []


def test_every_cited_document_exists():
    missing = set()
    for path in _tracked():
        if path.is_file():
            missing |= {(str(path.relative_to(ROOT)), m) for m in CITED.findall(path.read_text()) if not (ROOT / "docs" / m).is_file()}
    for doc in (ROOT / "docs").glob("*.md"):  # relative links between the docs
        missing |= {(doc.name, m) for m in re.findall(r"\]\(([\w.-]+\.(?:md|json))\)", doc.read_text()) if not (ROOT / "docs" / m).is_file()}
    assert missing == set()
