"""Limits are checked before anything is allocated, and absurd values are one line, exit 2
(issue 13, items 2 and 6)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import FIXTURES
from nsys_collective.cli import app
from nsys_collective.model.job import Filters

DEMO = FIXTURES / "demo-4rank-2host"


def one_line_exit_2(result, *words):
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


def run(*args):
    return CliRunner().invoke(app, list(map(str, args)))


def _address_space_limit(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def test_a_rank_range_of_a_hundred_billion_costs_no_memory():
    # Under a 4 GiB address-space limit: building the range (24 GB) fails instead of taking the machine.
    proc = subprocess.run([sys.executable, "-m", "nsys_collective", "analyze", str(DEMO), "--ranks", "0-99999999999", "--json"],
                          capture_output=True, text=True, timeout=300, preexec_fn=_address_space_limit(4 << 30))
    assert proc.returncode == 0, proc.stderr
    assert [r["rank"] for r in json.loads(proc.stdout)["ranks"]] == [0, 1, 2, 3]


@pytest.fixture
def bounded_memory():
    """This process may take 2 GiB more address space, no more: a test that would build 24 GB
    fails with MemoryError instead of calling the OOM killer on a shared machine."""
    import psutil

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (psutil.Process().memory_info().vms + (2 << 30), hard))
    yield
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_rank_ranges_are_intervals(bounded_memory):
    ranks = Filters.parse(ranks="0-99999999999,7, 200000000000").ranks
    assert 0 in ranks and 99999999999 in ranks and 7 in ranks and 200000000000 in ranks
    assert 100000000000 not in ranks and -1 not in ranks


@pytest.mark.parametrize("ranks", ["5-1", "-1", "a-b", "1-", "", "0-3,,7"])
def test_a_bad_rank_list_is_one_line_exit_2(ranks):
    one_line_exit_2(run("analyze", DEMO, "--ranks", ranks), "--ranks")


@pytest.mark.parametrize("window", ["nan:nan", "nan:1", "0:nan", "inf:inf", "-inf:1", "0:inf", "5:1", "1e300:2e300"])
def test_a_window_that_is_not_finite_ordered_seconds_is_one_line_exit_2(window):
    one_line_exit_2(run("analyze", DEMO, "--window", window), "--window")


def test_a_window_with_an_open_end_still_works():
    result = run("analyze", DEMO, "--window", "0.001:", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["summary"]["collectives"] > 0


@pytest.mark.parametrize("window_s", [(float("nan"), float("nan")), (float("-inf"), 1.0), (2.0, 1.0)])
def test_the_api_refuses_the_same_windows(window_s):
    import nsys_collective as nc

    with pytest.raises(ValueError, match="window"):
        nc.load(str(DEMO), window_s=window_s)


@pytest.mark.parametrize("threads", ["100000", "0", "-3"])
def test_threads_beyond_the_cap_are_one_line_exit_2(threads):
    cap = 4 * (os.cpu_count() or 1)
    one_line_exit_2(run("analyze", DEMO, "--threads", threads), "--threads", str(cap))


def test_threads_up_to_the_cap_work():
    result = run("analyze", DEMO, "--threads", str(4 * (os.cpu_count() or 1)), "--json")
    assert result.exit_code == 0, result.stderr


@pytest.fixture
def store(tmp_path) -> str:
    from nsys_collective.store import open_store

    url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(url).dispose()
    return url


@pytest.mark.parametrize("run_id", [str(2**63), "99999999999999999999999"])
def test_a_run_id_beyond_2_63_is_one_line_exit_2(store, tmp_path, run_id):
    one_line_exit_2(run("report", run_id, "--db", store, "--out", tmp_path / "out"), run_id)
    one_line_exit_2(run("compare", run_id, str(DEMO), "--db", store), run_id)
    assert not (tmp_path / "out").exists()
