"""Shared test helpers: where the real exports are, and their known facts."""

from __future__ import annotations

import csv
import hashlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "real"
FIXTURES = ROOT / "fixtures"
NO_REAL_DATA = f"real exports not found at {REAL} (they live beside the project checkout, not in it)"


# The fixture generator (fixturegen/, a test tool, not part of the installed package) from the checkout.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
import fixturegen as gen  # noqa: E402


def real_facts() -> list[dict[str, str]]:
    """FACTS.tsv rows, one per real export; empty when the real data is absent."""
    facts = REAL / "FACTS.tsv"
    if not facts.is_file():
        return []
    with facts.open(newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def real_params():
    rows = real_facts()
    if not rows:
        return [pytest.param(None, marks=pytest.mark.skip(reason=NO_REAL_DATA), id="no-real-data")]
    return [pytest.param(row, id=row["file"]) for row in rows]


@pytest.fixture
def real_dir() -> Path:
    if not REAL.is_dir():
        pytest.skip(NO_REAL_DATA)
    return REAL


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_hashes(root: Path) -> dict[str, str]:
    """Hash of every file under root (or of root itself), to show inputs were left unchanged."""
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p): sha256(p) for p in files}
