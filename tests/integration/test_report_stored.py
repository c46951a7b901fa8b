"""`collectivetrace-nsys report RUN`: a run stored by `batch` renders exactly as `analyze --out`
rendered it, file for file and byte for byte."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import FIXTURES, tree_hashes
from nsys_collective.cli import app

runner = CliRunner()


def relative(folder):
    """Hash of every file under folder, by its path inside it."""
    return {str(Path(p).relative_to(folder)): h for p, h in tree_hashes(folder).items()}


@pytest.mark.parametrize("job", ["demo-4rank-2host", "slow-kernel-8rank-3host"])
def test_a_stored_run_renders_exactly_like_a_fresh_one(tmp_path, job):
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / job, root / job)
    (root / job / "truth.json").unlink()
    fresh = runner.invoke(app, ["analyze", str(root / job), "--out", str(tmp_path / "fresh")])
    assert fresh.exit_code == 0, fresh.output
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    stored = runner.invoke(app, ["batch", str(root), "--db", url])
    assert stored.exit_code == 0, stored.output
    rendered = runner.invoke(app, ["report", "1", "--db", url, "--out", str(tmp_path / "stored")])
    assert rendered.exit_code == 0, rendered.output
    a, b = (relative(tmp_path / side) for side in ("fresh", "stored"))
    assert sorted(a) == sorted(b) and {"report.html", "charts/timeline.png", "blocking.csv"} <= set(a)
    assert [name for name in a if a[name] != b[name]] == []


def test_an_unknown_run_is_one_line_and_exit_2(tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    runner.invoke(app, ["batch", str(FIXTURES / "balanced-2rank"), "--db", url])
    result = runner.invoke(app, ["report", "7", "--db", url, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "run 7" in result.stderr
    assert not (tmp_path / "out").exists()
