"""The CLI as users meet it: exit statuses, stdout/stderr split, the JSON fields, bad input."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import REAL, ROOT, tree_hashes
from nsys_collective import __version__
from nsys_collective.cli import app

runner = CliRunner()
RANK_FIELDS = {"rank", "host", "pid", "device", "report", "clock_offset_ns", "clock_drift_ppm", "kernels",
               "nccl_kernels", "nccl_time_ns", "overlap_share"}


def run(*args: str):
    return runner.invoke(app, list(args))


def test_version_and_help():
    assert run("--version").stdout.strip() == f"collectivetrace-nsys {__version__}"
    result = run("analyze", "--help")
    assert result.exit_code == 0 and "--json" in result.stdout


def bad_inputs(tmp_path):
    """Each kind of unusable input, with the words its one-line message must contain."""
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database\n")
    plain = tmp_path / "plain.sqlite"
    with sqlite3.connect(plain) as db:
        db.execute("CREATE TABLE t (x)")
        db.execute("INSERT INTO t VALUES (1)")
    db.close()
    no_exports = tmp_path / "nothing-here"
    no_exports.mkdir()
    (no_exports / "readme.txt").write_text("x")
    cases = {
        "missing": (tmp_path / "absent.sqlite", "no such file"),
        "empty": (empty, "empty file"),
        "not-sqlite": (text, "not an SQLite file"),
        "not-nsys": (plain, "not an Nsight Systems export"),
        "no-exports-in-dir": (no_exports, "no Nsight Systems exports"),
    }
    if REAL.is_dir():
        truncated = tmp_path / "truncated.sqlite"
        truncated.write_bytes((REAL / "versions" / "nsys-2024.5-pipit-cloverleaf.sqlite").read_bytes()[:60_000])
        cases["truncated"] = (truncated, "truncated")
    return cases


@pytest.mark.parametrize("case", ["missing", "empty", "not-sqlite", "not-nsys", "no-exports-in-dir", "truncated"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case):
    cases = bad_inputs(tmp_path)
    if case not in cases:
        pytest.skip(f"needs the real exports at {REAL}")
    path, words = cases[case]
    before = tree_hashes(path) if path.exists() else {}
    result = run("analyze", str(path), "--json")
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0] and str(path) in lines[0]
    assert (tree_hashes(path) if path.exists() else {}) == before


def test_one_bad_file_among_good_ones_fails_the_run(tmp_path, real_dir):
    good = real_dir / "fs24-ring-6rank-2node"
    bad = tmp_path / "rank9.sqlite"
    bad.write_bytes(b"")
    result = run("analyze", str(good), str(bad))
    assert result.exit_code == 2 and "rank9.sqlite: empty file" in result.stderr and result.stdout == ""


def test_entry_point_prints_no_traceback(tmp_path):
    """The installed command, as a user runs it: one line, exit 2, no traceback."""
    # the entry point of the install under test (beside this interpreter), else the one on PATH
    exe = (shutil.which("collectivetrace-nsys", path=str(Path(sys.executable).parent))
           or shutil.which("collectivetrace-nsys") or pytest.skip("collectivetrace-nsys is not installed on PATH"))
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"SQLite format 3\x00" + b"\x00" * 40)
    proc = subprocess.run([exe, "analyze", str(broken)], capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "truncated" in proc.stderr


def test_json_inputs_and_ranks_of_a_real_job(real_dir):
    job = real_dir / "fs24-allreduce2x-9rank-3node"
    before = tree_hashes(job)
    result = run("analyze", str(job), "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 2 and doc["tool_version"] == __version__
    assert len(doc["inputs"]) == 9
    assert {i["nsys_version"] for i in doc["inputs"]} == {"2024.5.1.113"} and {i["schema"] for i in doc["inputs"]} == {"3.13.2"}
    ranks = doc["ranks"]
    assert [r["rank"] for r in ranks] == list(range(9))
    assert all(RANK_FIELDS <= set(r) for r in ranks)
    assert {r["host"] for r in ranks} == {"ault42.cscs.ch", "ault43.cscs.ch", "ault44.cscs.ch"}
    assert all(r["kernels"] == 2 and r["nccl_kernels"] == 2 for r in ranks)
    assert {r["report"] for r in ranks} == {i["path"] for i in doc["inputs"]}
    assert all(r["overlap_share"] == 0.0 and r["nccl_time_ns"] > 0 for r in ranks)  # NCCL only, no compute
    assert tree_hashes(job) == before


def test_terminal_table_goes_to_stdout_and_warnings_to_stderr(real_dir):
    result = run("analyze", str(real_dir / "versions" / "nsys-2023.2-sgemm.sqlite"), str(real_dir / "fs24-ring-6rank-2node"))
    assert result.exit_code == 0
    assert "7 ranks" in result.stdout and "ault44.cscs.ch" in result.stdout
    assert "zero kernels" in result.stderr and "zero kernels" not in result.stdout


def test_module_runs_without_install_entry_point(real_dir):
    proc = subprocess.run([sys.executable, "-m", "nsys_collective", "analyze", str(real_dir / "fs24-ring-6rank-2node"), "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["ranks"]) == 6


def _contract_example() -> dict:
    text = (ROOT / "docs" / "output-contract.md").read_text()
    return json.loads(text.split("```json", 1)[1].split("```", 1)[0])


def _conforms(example, actual, where="$") -> list[str]:
    """Every key of the contract's example is present with a compatible type (null allowed)."""
    problems = []
    if isinstance(example, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected an object"]
        for key, value in example.items():
            if key not in actual:
                problems.append(f"{where}.{key}: missing")
            elif actual[key] is not None:
                problems += _conforms(value, actual[key], f"{where}.{key}")
    elif isinstance(example, list):
        if not isinstance(actual, list):
            return [f"{where}: expected a list"]
        for i, item in enumerate(actual):
            # Items of one list may differ by kind (blame causes): compare with the example of the
            # same cause, else with the fields every item shares.
            same = [e for e in example if isinstance(e, dict) and isinstance(item, dict) and "cause" in e and e["cause"] == item.get("cause")]
            shared = {k: v for k, v in example[0].items() if all(k in e for e in example)} if example and isinstance(example[0], dict) else None
            template = same[0] if same else (shared if shared is not None and "cause" in example[0] else example[0] if example else None)
            problems += _conforms(template, item, f"{where}[{i}]") if template is not None else []
    elif isinstance(example, bool) or isinstance(actual, bool):
        if type(example) is not type(actual):
            problems.append(f"{where}: expected {type(example).__name__}")
    elif isinstance(example, (int, float)):
        if not isinstance(actual, (int, float)):
            problems.append(f"{where}: expected a number")
        elif isinstance(example, int) and where.endswith("_ns") and not isinstance(actual, int):
            problems.append(f"{where}: times are integer ns")
    elif isinstance(example, str) and not isinstance(actual, str):
        problems.append(f"{where}: expected a string")
    return problems


@pytest.mark.parametrize("job", ["demo-4rank-2host", "slow-kernel-8rank-3host"])
def test_json_conforms_to_the_contract(job):
    example = _contract_example()
    from conftest import FIXTURES

    result = run("analyze", str(FIXTURES / job), "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert _conforms(example, doc) == []
    # Every list the contract sorts "most important first" is sorted so.
    for entries in (doc["blocking_kernels"], doc["blocking_launches"], doc["whatif"]["causes"]):
        assert entries == sorted(entries, key=lambda e: -e["wait_saved_ns"])
    assert doc["contention"] == sorted(doc["contention"], key=lambda e: (-(e["contention_ns"] or 0), -e["overlap_ns"]))
    causes = {"kernel", "extra_kernel", "host", "host_group", "transfer", "idle", "unexplained", "window"}
    assert all(b["cause"] in causes for c in doc["collectives"] for b in c["blame"])


def test_the_contract_check_catches_a_broken_document():
    example = {"summary": {"wait_ns": 0, "top_straggler_rank": 3}, "blame": [{"cause": "kernel", "kernel": "k", "ns": 1}]}
    assert _conforms(example, {"summary": {"wait_ns": 5, "top_straggler_rank": None}, "blame": [{"cause": "kernel", "kernel": "g", "ns": 2}]}) == []
    assert _conforms(example, {"summary": {"wait_ns": 1.5}, "blame": [{"cause": "kernel", "ns": 2}]}) == [
        "$.summary.wait_ns: times are integer ns", "$.summary.top_straggler_rank: missing", "$.blame[0].kernel: missing"]
