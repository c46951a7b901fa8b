"""`compare` and the Python API: two generated runs whose slow kernel sits on different ranks must
come out as "the kernel moved from rank X to rank Y", with the planted waits; a run against itself
changes nothing; run ids resolve through the store; bad input is one line and exit 2."""

from __future__ import annotations

import dataclasses
import importlib
import json
import xml.etree.ElementTree as ET

import matplotlib.image
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from conftest import gen
import nsys_collective as nc
from nsys_collective.api import load
from nsys_collective.cli import app
from nsys_collective.compare import Comparison, compare_documents
from nsys_collective.errors import InputError
from nsys_collective.result import Result

runner = CliRunner()
PARAMS = dict(ranks=4, hosts=2, steps=6, kernels_per_step=40, buckets=3, scenario="slow_kernel")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two slow_kernel jobs alike in everything but the seed, chosen so that the slowed kernel
    runs on a different rank in each: (path A, truth A, path B, truth B)."""
    root = tmp_path_factory.mktemp("runs")
    a = root / "a"
    truth_a = gen.generate(a, seed=0, force=True, **PARAMS)
    for seed in range(1, 50):
        b = root / "b"
        truth_b = gen.generate(b, seed=seed, force=True, **PARAMS)
        if truth_b["causes"][0]["rank"] != truth_a["causes"][0]["rank"]:
            return a, truth_a, b, truth_b
    pytest.fail("no seed put the slow kernel on another rank")


def _planted(truth) -> tuple[str, int]:
    cause = truth["causes"][0]
    return cause["kernel"], cause["rank"]


def _saved(path, kernel, rank) -> int:
    """What `analyze` of one run says fixing the kernel on that rank would save (the comparison
    carries it as is; how close it comes to the planted truth is test_whatif's business)."""
    return next(e["wait_saved_ns"] for e in load(path).doc["whatif"]["causes"]
                if e["cause"] == "kernel" and e["name"] == kernel and e["rank"] == rank)


def _assert_moved(cmp: dict, truth_a: dict, truth_b: dict, a, b) -> None:
    kernel, rank_a = _planted(truth_a)
    _, rank_b = _planted(truth_b)
    [group] = [g for g in cmp["blocking_by_cause"] if g["kernel"] == kernel]
    assert group["moved"] and group["top_rank"] == {"a": rank_a, "b": rank_b}
    rows = {r["rank"]: r["wait_saved_ns"] for r in cmp["blocking"] if r["kernel"] == kernel}
    assert rows[rank_a]["a"] == _saved(a, kernel, rank_a)
    assert rows[rank_b]["b"] == _saved(b, kernel, rank_b)
    assert rows[rank_a]["b"] == 0 and rows[rank_b]["a"] == 0  # each run blames only its own slow rank
    assert cmp["summary"]["top_straggler_rank"] == {"a": rank_a, "b": rank_b, "changed": True}
    last = {r["rank"]: r["last"] for r in cmp["stragglers"]}
    n = cmp["a"]["collectives"]
    assert last[rank_a] == {"a": n, "b": 0, "delta": -n} and last[rank_b] == {"a": 0, "b": n, "delta": n}
    moved = [f for f in cmp["findings"] if " moved: " in f]
    assert len(moved) == 1
    assert f"rank {rank_a} late in A" in moved[0] and f"rank {rank_b} late in B" in moved[0]


def _assert_chart(png) -> None:
    svg = png.with_suffix(".svg")
    assert png.stat().st_size > 10_000 and svg.stat().st_size > 10_000
    pixels = matplotlib.image.imread(png)
    assert float(pixels[..., :3].std()) > 0.05, "blank chart"
    ET.parse(svg)  # well-formed


def test_cli_reports_the_kernel_that_moved(runs, tmp_path):
    a, truth_a, b, truth_b = runs
    chart = tmp_path / "charts" / "diff.png"
    chart.parent.mkdir()  # the folder must exist, as for every output (issue 17)
    result = runner.invoke(app, ["compare", str(a), str(b), "--json", "--chart", str(chart)])
    assert result.exit_code == 0, result.stderr
    cmp = json.loads(result.stdout)
    assert cmp["schema_version"] == 2
    assert cmp["a"]["source"] == str(a) and cmp["b"]["source"] == str(b) and len(cmp["a"]["inputs"]) == 4
    _assert_moved(cmp, truth_a, truth_b, a, b)
    [op] = cmp["operations"]
    assert op["op"] == "AllReduce" and op["count"] == {"a": 18, "b": 18, "delta": 0}
    assert cmp["alignment"]["violations_after"]["delta"] == 0
    _assert_chart(chart)
    assert "diff.png" in result.stderr


def test_cli_table(runs):
    a, truth_a, b, truth_b = runs
    result = runner.invoke(app, ["compare", str(a), str(b)])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"A: {a}") and lines[1].startswith(f"B: {b}")
    for title in ("What fixing each cause saves", "Operations", "Stragglers", "Clock alignment"):
        assert title in result.stdout
    assert " moved: it made rank " in result.stdout


def test_python_api(runs, tmp_path, capsys):
    a, truth_a, b, truth_b = runs
    run_a, run_b = load(a), load(str(b / "*.sqlite"))
    assert isinstance(run_a, Result) and run_a.timeline is not None
    assert run_a.summary["top_straggler_rank"] == truth_a["causes"][0]["rank"] and run_a.findings
    tables = nc.tables(run_a)
    assert set(tables) == {"collectives", "blame", "blocking", "contention", "ranks", "steps"}
    assert isinstance(tables["collectives"], pa.Table) and tables["collectives"].num_rows == 18
    diff = nc.compare_runs(run_a, run_b)
    assert isinstance(diff, Comparison) and diff.findings == diff.doc["findings"]
    _assert_moved(diff.doc, truth_a, truth_b, a, b)
    _assert_chart(diff.chart(tmp_path / "diff.png")[0])
    diff.render()
    assert " moved: " in capsys.readouterr().out
    # A path or list given to compare is loaded on the way.
    assert nc.compare_runs(run_a, [b]).doc["blocking"] == diff.doc["blocking"]


def test_python_api_filters(runs):
    a, *_ = runs
    assert load(a, ranks="0-1").summary["ranks"] == 2
    assert load(a, ranks=[0, 1, 2], hosts=["node0"]).summary["ranks"] == 2
    with pytest.raises(TypeError, match="unknown filters"):
        load(a, rank=1)


def _deltas(node):
    """Every {a, b, delta} node in a comparison document."""
    if isinstance(node, dict):
        if "delta" in node:
            yield node
        for key, value in node.items():
            if key != "delta":
                yield from _deltas(value)
    elif isinstance(node, list):
        for value in node:
            yield from _deltas(value)


def test_a_run_against_itself_changes_nothing(runs):
    a, *_ = runs
    doc = load(a).document
    cmp = compare_documents(doc, doc)
    deltas = list(_deltas(cmp))
    # unchanged where known; unknown (null, e.g. a contention figure without a clean baseline) stays null
    assert deltas and all(d["delta"] == 0 if d["a"] is not None else d["delta"] is None for d in deltas)
    assert any(d["delta"] == 0 for d in deltas)
    assert not any(g["moved"] for g in cmp["blocking_by_cause"])
    assert not cmp["summary"]["top_straggler_rank"]["changed"]
    assert cmp["findings"] == [f"Total collective wait is unchanged ({cmp['summary']['wait_ns']['a'] / 1e6:,.1f} ms)."]


@pytest.fixture
def store(monkeypatch):
    """The results store with load_result replaced: `store.results[run_id] = result` (kept as a
    store keeps it: without the timeline); an unknown id is unusable input, as in the store."""
    module = importlib.import_module("nsys_collective.store")
    monkeypatch.setattr(module, "results", {}, raising=False)
    monkeypatch.setattr(module, "calls", [], raising=False)

    def load_result(url_or_engine, run_id: int) -> Result:
        module.calls.append((url_or_engine, run_id))
        if run_id not in module.results:
            raise InputError(f"run {run_id}: not in the results store at {url_or_engine}")
        return dataclasses.replace(module.results[run_id], timeline=None, source=f"run {run_id}")

    monkeypatch.setattr(module, "load_result", load_result)
    return module


def test_run_ids_resolve_in_the_store(runs, store):
    a, truth_a, b, truth_b = runs
    store.results = {1: load(a), 2: load(b)}
    result = runner.invoke(app, ["compare", "1", "2", "--json", "--db", "sqlite:///runs.db"])
    assert result.exit_code == 0, result.stderr
    cmp = json.loads(result.stdout)
    assert cmp["a"]["source"] == "run 1" and cmp["b"]["source"] == "run 2"
    assert store.calls == [("sqlite:///runs.db", 1), ("sqlite:///runs.db", 2)]
    _assert_moved(cmp, truth_a, truth_b, a, b)
    # A stored run against a path, and the API's default database.
    stored = load(1)
    assert stored.timeline is None and store.calls[-1] == ("sqlite:///collectivetrace.db", 1)
    _assert_moved(nc.compare_runs(stored, load(b)).doc, truth_a, truth_b, a, b)


def _one_error_line(result, *words) -> None:
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr
    for w in words:
        assert w in lines[0]


def test_bad_input_is_one_line_and_exit_2(runs, store, tmp_path):
    a, *_ = runs
    _one_error_line(runner.invoke(app, ["compare", str(a), str(tmp_path / "absent")]), "absent", "no such file")
    _one_error_line(runner.invoke(app, ["compare", str(tmp_path / "x*.sqlite"), str(a)]), "no file or directory matches")
    _one_error_line(runner.invoke(app, ["compare", "99", str(a), "--db", "sqlite:///runs.db"]), "run 99", "not in the results store")


def test_committed_fixtures_as_in_the_docs():
    """docs/python-api.md compares the two committed jobs: keep what it shows true."""
    from conftest import FIXTURES

    demo = load(FIXTURES / "demo-4rank-2host")
    # Tables keep every row's columns: the host cause's NVTX range is not lost.
    blocking = nc.tables(demo)["blocking"].to_pylist()
    assert {"name", "wait_saved_ns", "step_time_saved_ns"} <= set(blocking[0])
    assert "DataLoader.__next__" in {r["name"] for r in blocking if r["cause"] == "host"}
    diff = nc.compare_runs(demo, FIXTURES / "slow-kernel-8rank-3host")
    findings = diff.findings
    assert any(f.startswith("Host time in 'DataLoader.__next__' no longer blocks in B: it made rank 0 late") for f in findings)
    assert any(" moved: it made rank 3 late in A" in f and "rank 2 late in B" in f for f in findings)
    biggest = next(g for g in diff.doc["blocking_by_cause"] if g["moved"])
    assert biggest["kernel"].startswith("sm90_xmma_gemm") and biggest["top_rank"] == {"a": 3, "b": 2}
