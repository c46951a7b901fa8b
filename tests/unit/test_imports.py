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


def test_analyze_json_loads_no_pydantic():
    modules = loaded("analyze", str(FIXTURES / "demo-4rank-2host"), "--json")
    # typer's coercion (a pydantic adapter per parameter) only for values that need converting.
    assert held(modules, ("pydantic", "typer._adapters")) == []
    assert held(loaded("analyze", str(FIXTURES / "demo-4rank-2host"), "--json", "--threads", "2"), ("pydantic",)) == ["pydantic"]


def test_the_deferred_coercion_gives_what_typer_s_own_gives():
    """cli.commands._Deferred stands in for typer's pydantic coercion for the values left as they
    are: each gives the same value of the same type as typer's own for every parameter of every
    command (and where it would not, it hands the value to typer's)."""
    from typer._coercion import build_runtime_param
    from typer.main import get_command

    from nsys_collective.cli import app
    from nsys_collective.cli.commands import _Deferred

    group = get_command(app)
    tried = 0
    for name, command in group.commands.items():
        ctx = command.make_context(name, [], resilient_parsing=True)
        for param in command.params:
            if not hasattr(param, "type_descriptor"):
                continue
            for value in (None, param.default, "text", "", ("a", "b"), (), 3, 2.5):
                theirs = mine = None
                try:
                    theirs = build_runtime_param(param.type_descriptor).coerce(value, param=param, ctx=ctx)
                except Exception as e:
                    theirs = type(e)
                try:
                    mine = _Deferred().coerce(value, param, ctx)
                except Exception as e:
                    mine = type(e)
                param._runtime_param = _Deferred()
                assert (type(mine), mine) == (type(theirs), theirs), (name, param.name, value)
                tried += 1
    assert tried > 100


@pytest.mark.parametrize("limited", [False, True])
def test_no_prefetch_under_an_address_space_limit(limited):
    """Under `ulimit -v` the read may need all the room there is; scipy's libraries loading beside
    it would take it, or run out of it where C code spins or crashes instead of raising
    (pipeline.prefetch_reduce). The reduce then imports them itself, after the read."""
    code = ("import resource, sys\n"
            "if sys.argv[1] == 'True': resource.setrlimit(resource.RLIMIT_AS, (1 << 45, resource.RLIM_INFINITY))\n"
            "from nsys_collective import pipeline\n"
            "pipeline.prefetch_reduce()\n"
            "print(bool(pipeline._prefetch))")
    proc = subprocess.run([sys.executable, "-c", code, str(limited)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [str(not limited)]


@pytest.mark.parametrize("preset, expected", [({}, "1"), ({"OPENBLAS_NUM_THREADS": "4"}, "4"), ({"OMP_NUM_THREADS": "3"}, "None")])
def test_the_blas_loads_with_one_thread_unless_the_user_chose(preset, expected):
    """cli.BLAS_THREADS: OpenBLAS reads its thread count when it loads; the command asks for one
    (the analysis multiplies small matrices), and leaves any count the user set alone."""
    import os

    code = ("import atexit, os, sys\n"
            "atexit.register(lambda: print(os.environ.get('OPENBLAS_NUM_THREADS'), file=sys.stderr))\n"
            "sys.argv = ['collectivetrace-nsys', 'glossary']\n"
            "from nsys_collective.cli import main\n"
            "main()")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env={**env, **preset})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.split()[-1] == expected
