"""The command line and the checkout as a new user meets them (issue 14): `-h` everywhere, exit
statuses and examples in `analyze --help`, one line per command in the list, tested Typer and rich
pinned, plurals, README outputs ignored by git, and one build in scripts/test.sh."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from packaging.requirements import Requirement
from typer.testing import CliRunner

from conftest import ROOT
from nsys_collective.attribution.findings import verdict_lines
from nsys_collective.cli import app

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

COMMANDS = ("analyze", "batch", "compare", "report", "glossary")
runner = CliRunner()


@pytest.mark.parametrize("args", [[], *([c] for c in COMMANDS)])
def test_h_is_help_everywhere(args):
    short, long = runner.invoke(app, [*args, "-h"], terminal_width=120), runner.invoke(app, [*args, "--help"], terminal_width=120)
    assert short.exit_code == 0 and "Usage:" in short.stdout
    assert short.stdout == long.stdout


def test_analyze_help_has_exit_statuses_and_examples():
    text = runner.invoke(app, ["analyze", "--help"], terminal_width=120).stdout
    assert re.search(r"Exit status: 0 on success .*; 1 for an internal error .*; 2 for unusable input", " ".join(text.split()))
    examples = [line.strip() for line in text.splitlines() if line.strip().startswith("collectivetrace-nsys analyze ")]
    assert len(examples) >= 2 and any("--json" in e for e in examples) and any("--out" in e for e in examples)
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "PATH" in usage and "{paths}" not in usage
    for option in ("--json", "--force"):  # a flag takes no value: no type beside it
        assert "<bool>" not in next(line for line in text.splitlines() if option + " " in line)


def test_the_command_list_has_one_line_per_command():
    text = runner.invoke(app, ["--help"], env={"COLUMNS": "160"}).stdout
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "Commands" in line)
    rows = [line for line in lines[start + 1:] if not line.startswith("╰")][:len(COMMANDS) + 1]
    assert [row.split()[1] for row in rows[:len(COMMANDS)]] == list(COMMANDS)
    assert rows[len(COMMANDS)].startswith("╰") or not rows[len(COMMANDS)].strip("│ "), "no command's help wraps to a second line"


def test_typer_and_rich_are_pinned_to_the_tested_ranges():
    wanted = {Requirement(r).name: Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}
    for name in ("typer", "rich"):
        spec = wanted[name].specifier
        assert any(s.operator == "<" for s in spec), f"{name} has an upper bound"
        assert spec.contains(importlib.metadata.version(name)), f"the installed {name} is in the pinned range"


class _Collectives(list):
    communicators = ["c0"]


def test_one_of_a_kind_reads_singular():
    job = SimpleNamespace(ranks=[SimpleNamespace(host="node0"), SimpleNamespace(host="node0")], collectives=_Collectives([0]),
                          timing=SimpleNamespace(wait_cost=np.array([5_000_000]), straggler=np.array([1])))
    lines = verdict_lines(job)
    assert lines[0] == "2 ranks on 1 host, 1 collective matched in 1 communicator."
    assert lines[2].startswith("Rank 1 arrived last in 1 of 1 collective and cost the others 5.00 ms")


def test_readme_outputs_are_ignored_by_git():
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    outputs = ["collectivetrace.db", "compare.png", "compare.svg", "compare.json", "demo-report/report.html",
               "report/report.html", "run3/report.html", "job.trace.json", "runs.db"]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *outputs], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert sorted(ignored) == sorted(outputs)


def test_the_package_imports_from_the_repository_root():
    proc = subprocess.run([sys.executable, "-c", "import nsys_collective, nsys_collective._native; print(nsys_collective.__file__)"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert not proc.stdout.strip().startswith(str(ROOT / "nsys_collective")), "the root holds no package folder to shadow it"


def _built():
    spec = importlib.util.spec_from_file_location("built", ROOT / "scripts" / "built.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_test_sh_builds_only_when_a_source_is_newer_than_the_extension(tmp_path, monkeypatch, capsys):
    built = _built()
    if not built._editable_here():
        pytest.skip("this checkout is not installed in editable mode (scripts/test.sh installs it so)")
    extension = built._extension()
    source = tmp_path / "lib.rs"
    source.write_text("// a Rust source\n")
    monkeypatch.setattr(built, "_sources", lambda: [source])
    made = extension.stat().st_mtime
    os.utime(source, (made - 60, made - 60))
    assert built.main() == 0, "sources older than the extension: no build"
    os.utime(source, (made + 60, made + 60))
    assert built.main() == 1, "a source newer than the extension: build"
    monkeypatch.setattr(built, "ROOT", tmp_path)
    os.utime(source, (made - 60, made - 60))
    assert built.main() == 1, "installed from another checkout: build"
    assert "scripts/built.py" in (ROOT / "scripts" / "test.sh").read_text()


def test_skips_of_absent_real_data_share_one_wording():
    """One reason, naming the folder, in pytest's skips and in cargo's ignored tests alike
    (issue 21: there were about 15 wordings)."""
    from conftest import REAL, no_real_data

    rust = [(path.name, m.group(1)) for path in sorted((ROOT / "crates").rglob("*.rs"))
            for m in re.finditer(r'ignore\s*=\s*"([^"]*)"', path.read_text())]
    assert rust, "the Rust tests that read the real data say why they are ignored"
    for name, reason in rust:
        folder = re.match(r"real data not found at (\S+) ", reason)
        assert folder and reason == no_real_data(folder.group(1)), (name, reason)
    assert no_real_data(REAL / "kineto") == no_real_data("../shared/data/real/kineto")
    # Python: every skip about real data goes through conftest's no_real_data / need_real / needs_real.
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"pytest\.skip\(|reason=", line) and re.search(r"\breal (data|exports?|traces?|reports?)", line, re.I):
                assert "no_real_data(" in line or "NO_" in line, f"{path.name}:{number}: {line.strip()}"
