"""Shared test helpers: where the real exports are, and their known facts."""

from __future__ import annotations

import csv
import hashlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "real"
FIXTURES = ROOT / "fixtures"


def no_real_data(path: Path | str = REAL) -> str:
    """The one reason every test gives when real data it needs is absent, naming the file or folder
    as the repository sees it (crates/core/tests' ignore reasons say the same, checked by
    tests/integration/test_help_and_packaging.py)."""
    shown = Path(os.path.relpath(path, ROOT)).as_posix() if Path(path).is_absolute() else str(path)
    return f"real data not found at {shown} (it lives beside the checkout, never in it)"


NO_REAL_DATA = no_real_data()


def need_real(path: Path) -> Path:
    """path, or skip the calling test with the one wording when it is absent."""
    if not Path(path).exists():
        pytest.skip(no_real_data(path))
    return path


def needs_real(*paths: Path) -> pytest.MarkDecorator:
    """A mark skipping a test, with the one wording, unless every path exists."""
    absent = [p for p in paths if not Path(p).exists()]
    return pytest.mark.skipif(bool(absent), reason=no_real_data(absent[0]) if absent else "")


# The fixture generator (fixturegen/, a test tool, not part of the installed package) from the checkout.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
import fixturegen as gen  # noqa: E402


def numbered_ranks(paths):
    """(ranks, warnings): every rank the inputs hold, numbered (model.ranks), and the inputs' and
    the numbering's warnings."""
    from nsys_collective import pipeline
    from nsys_collective.model.ranks import number_ranks

    traced = pipeline.map_inputs(pipeline.prepare([str(p) for p in paths]))
    numbered, warnings = number_ranks([t for _, traces in traced for t in traces])
    return [r for r, _ in numbered], [w for facts, _ in traced for w in facts.warnings] + warnings


def analyzed(paths, filters=None):
    """(job, result) of paths through the pipeline: the model (model.job.Job), and what the
    commands render (result.Result)."""
    from nsys_collective import pipeline

    traced = pipeline.map_inputs(pipeline.prepare([str(p) for p in paths]))
    job = pipeline.model(traced, filters)
    return job, pipeline.finish(job, traced)


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
    return need_real(REAL)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_hashes(root: Path) -> dict[str, str]:
    """Hash of every file under root (or of root itself), to show inputs were left unchanged."""
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p): sha256(p) for p in files}


def assert_same_export(a, b) -> None:
    """Two readings of one export hold the same facts and the same int64 columns."""
    from nsys_collective.ingest.capture import TABLES

    assert a.session == b.session
    assert a.metadata == b.metadata and a.system_env == b.system_env and a.capture == b.capture
    assert a.strings == b.strings
    assert a.warnings == b.warnings
    for name in TABLES:
        ta, tb = getattr(a, name), getattr(b, name)
        assert list(ta) == list(tb), name
        for column in ta:
            assert ta[column].dtype == np.int64, (name, column)
            np.testing.assert_array_equal(ta[column], tb[column], err_msg=f"{a.path}: {name}.{column}")
