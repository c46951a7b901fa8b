"""Every bad input or environment case is one line on stderr and exit status 2, with no traceback
and no source lines, through the installed command (issue 13, item 6)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import FIXTURES
from nsys_collective.cli import app

DEMO = FIXTURES / "demo-4rank-2host"


def command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nsys_collective", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("args, words", [
    (["analyze", DEMO, "--threads", "abc"], "--threads"),
    (["analyze", DEMO, "--window"], "--window"),
    (["analyze", DEMO, "--no-such-option"], "--no-such-option"),
    (["analyze"], "'PATH'"),
    (["report", "not-a-number", "--out", "x"], "'RUN'"),
    (["batch", "root", "--executor", "spark"], "--executor"),
    (["frobnicate"], "frobnicate"),
])
def test_a_bad_command_line_is_one_line_exit_2(args, words):
    proc = command(*args)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and words in line, line
    assert proc.stdout == ""


def test_help_and_version_still_work():
    assert command("--version").stdout.startswith("collectivetrace-nsys ")
    help_text = command("analyze", "--help")
    assert help_text.returncode == 0 and "--perfetto" in help_text.stdout
    bare = command()
    assert bare.returncode == 2 and "analyze" in bare.stdout + bare.stderr


def test_python_warnings_are_one_line_without_source(monkeypatch):
    import numpy as np

    import nsys_collective.pipeline as pipeline

    real = pipeline.reduce

    def noisy(*args, **kwargs):
        np.float64(1.0) / np.float64(0.0)  # numpy: "RuntimeWarning: divide by zero encountered"
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "reduce", noisy)
    result = CliRunner().invoke(app, ["analyze", str(DEMO), "--json"])
    assert result.exit_code == 0, result.stderr
    assert result.stderr.strip().splitlines() == ["warning: divide by zero encountered in scalar divide"]


def test_an_internal_error_is_one_line_exit_1(monkeypatch):
    import nsys_collective.pipeline as pipeline

    def broken(*args, **kwargs):
        raise RuntimeError("first line\nsecond line\n[SQL: SELECT 1]")

    monkeypatch.setattr(pipeline, "reduce", broken)
    result = CliRunner().invoke(app, ["analyze", str(DEMO), "--json"])
    assert result.exit_code == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("internal error: RuntimeError: first line") and "COLLECTIVETRACE_DEBUG=1" in line


def test_a_compare_chart_that_cannot_be_written_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = CliRunner().invoke(app, ["compare", str(DEMO), str(DEMO), "--chart", str(blocker / "cmp.png")])
    assert result.exit_code == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "cmp.png" in line
    assert blocker.read_text() == "x"
