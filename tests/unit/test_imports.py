"""What each command line loads (issue 22, start-up): `--help` and `--version` load neither the
analysis (numpy, scipy, the readers' columns) nor any output's library; `analyze --json` loads no
output library (matplotlib, jinja2, pyarrow, pandas) nor the store's or the cluster's (sqlalchemy,
dask). Each command runs in a fresh interpreter, which reports the modules it holds at exit. Not a
timed test: scripts/bench_analyze.py and `python -X importtime` measure the time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

OUTPUT_LIBRARIES = ("matplotlib", "jinja2", "pyarrow", "pandas", "sqlalchemy", "dask", "distributed")
ANALYSIS = ("numpy", "scipy", "nsys_collective.pipeline", "nsys_collective.model", "nsys_collective.attribution",
            "nsys_collective.result")

# Runs the installed command's entry point in-process, then prints the top-level names of every
# module loaded (and the loaded package modules and scipy's subpackages whole) on stderr's last line.
PROBE = """
import atexit, json, sys
def report():
    names = {m.split(".")[0] for m in sys.modules} | {m for m in sys.modules if m.startswith(("nsys_collective", "scipy."))}
    print("\\n" + json.dumps(sorted(names)), file=sys.stderr)
atexit.register(report)
sys.argv = ["collectivetrace-nsys", *sys.argv[1:]]
from nsys_collective.cli import main
main()
"""


def loaded(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(json.loads(proc.stderr.strip().splitlines()[-1]))


def held(modules: set[str], names) -> list[str]:
    return sorted(n for n in names if n in modules or any(m.startswith(n + ".") for m in modules))


@pytest.mark.parametrize("args", [["--version"], ["--help"], *([c, "--help"] for c in ("analyze", "batch", "compare", "report"))])
def test_help_and_version_load_no_analysis_and_no_output_library(args):
    modules = loaded(*args)
    # pydantic: typer's coercion of a help flag left without a default (cli.commands._HelpFlag).
    assert held(modules, ANALYSIS + OUTPUT_LIBRARIES + ("pydantic",)) == []
    if args == ["--version"]:  # the one line, before the command line's libraries load
        assert held(modules, ("typer", "rich")) == []


def test_analyze_json_loads_no_output_library():
    modules = loaded("analyze", str(FIXTURES / "demo-4rank-2host"), "--json")
    # The probe sees what the command loads inside it (else the assertion below could not fail).
    assert held(modules, ("numpy", "scipy", "nsys_collective.pipeline")) == ["nsys_collective.pipeline", "numpy", "scipy"]
    assert held(modules, OUTPUT_LIBRARIES) == []
    # The contention fit's F test reads scipy.special's fdtrc: scipy.stats costs 0.6 s of start-up.
    assert held(modules, ("scipy.optimize", "scipy.special", "scipy.stats")) == ["scipy.optimize", "scipy.special"]


def test_the_package_root_loads_its_api_on_first_use():
    code = ("import sys, nsys_collective as nc; before = 'numpy' in sys.modules; nc.Result; "
            "print(before, 'numpy' in sys.modules, nc.__version__ == __import__('nsys_collective.version').version.__version__)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["False", "True", "True"], proc.stderr
