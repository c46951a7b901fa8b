"""Shared test helpers: where the real exports are, and their known facts."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import sys
import textwrap
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


def name_matches(pattern, ids, strings):
    """Which of `ids` (ids into `strings`, -1 unnamed) name a CUDA call `pattern` matches, asked of
    each name on its own: the reference the traces' call kinds (cuda_api.kinds, of_kind) are held to."""
    from nsys_collective.model import cuda_api

    return cuda_api.by_name(lambda name: bool(name and pattern.match(name)), ids, strings)


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


def fake_nsys(tmp_path: Path, action: str, help_text: str = "usage: nsys export [options] <report>") -> Path:
    """Write an `nsys` script; in `action`, $out is the --output path and $report the input.
    `export --help` prints help_text (and is not logged as a call)."""
    log = tmp_path / "nsys-calls.log"
    script = tmp_path / "bin" / "nsys"
    script.parent.mkdir(exist_ok=True)
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1 $2" = "export --help" ]; then printf '%s\\n' "{help_text}"; exit 0; fi
        echo "$*" >> "{tmp_path / 'nsys-args.log'}"
        out=""
        while [ $# -gt 1 ]; do
            if [ "$1" = "--output" ]; then out="$2"; fi
            shift
        done
        report="$1"
        echo "$out $report" >> "{log}"
        """) + textwrap.dedent(action))
    script.chmod(0o755)
    return script


def nsys_calls(tmp_path: Path) -> list[str]:
    """The exports a fake_nsys was asked for, one `OUT REPORT` line each."""
    log = tmp_path / "nsys-calls.log"
    return log.read_text().splitlines() if log.exists() else []


_GENERATED: dict = {}


def analyzed_generated(tmp_path: Path, scenario: str, seed: int, **params) -> tuple[dict, dict]:
    """`analyze --json` of a job the generator makes, and its truth; cached per arguments, so the
    tests that check one job's naming and its amounts share one generation and one analysis."""
    from typer.testing import CliRunner

    from nsys_collective.cli import app

    key = (scenario, seed, tuple(sorted(params.items())))
    if key not in _GENERATED:
        truth = gen.generate(tmp_path, scenario=scenario, seed=seed, **params)
        result = CliRunner().invoke(app, ["analyze", str(tmp_path), "--json"])
        assert result.exit_code == 0, result.stderr
        _GENERATED[key] = (json.loads(result.stdout), truth)
    return _GENERATED[key]
