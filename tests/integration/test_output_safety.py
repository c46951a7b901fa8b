"""Outputs never replace an input, a folder holding one, or anything the tool did not write, with
or without --force; a replaced folder is swapped in one step; leftovers of an interrupted run are
ignored as inputs and cleaned by the next run (issue 13, items 1 and 6)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import FIXTURES, tree_hashes
from nsys_collective import outputs
from nsys_collective.cli import app

DEMO = FIXTURES / "demo-4rank-2host"
AGED = time.time() - 3 * 24 * 3600  # older than any "still in use" grace period


def run(*args):
    return CliRunner().invoke(app, ["analyze", *map(str, args)])


def one_line_exit_2(result, *words):
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.fixture
def job(tmp_path) -> Path:
    """A copy of the demo job in tmp_path/jobs/demo, with a sibling job beside it."""
    jobs = tmp_path / "jobs"
    shutil.copytree(DEMO, jobs / "demo")
    shutil.copytree(FIXTURES / "balanced-2rank", jobs / "sibling")
    return jobs / "demo"


def written_whole(out: Path) -> bool:
    """A complete output folder: its marker lists exactly the files in it, report included."""
    listed = outputs.listed_files(out)
    present = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {outputs.MARKER}
    return listed is not None and listed == present and "report.html" in present


# --out -----------------------------------------------------------------------------------------

def test_out_force_never_replaces_the_input_folder(job):
    before = tree_hashes(job.parent)
    one_line_exit_2(run(job, "--out", job, "--force"), str(job), "input")
    assert tree_hashes(job.parent) == before


def test_out_force_never_replaces_the_parent_of_the_inputs_or_its_siblings(job):
    before = tree_hashes(job.parent)
    one_line_exit_2(run(job, "--out", job.parent, "--force"), "input")
    assert tree_hashes(job.parent) == before


def test_out_force_never_replaces_a_folder_holding_one_input_file(job):
    before = tree_hashes(job.parent)
    one_line_exit_2(run(job / "rep_0.sqlite", job / "rep_1.sqlite", "--out", job, "--force"), "rep_0.sqlite")
    assert tree_hashes(job.parent) == before


def test_out_force_never_replaces_a_folder_it_did_not_write(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    one_line_exit_2(run(DEMO, "--out", out, "--force"), str(out), "not written by collectivetrace-nsys")
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_out_force_never_replaces_a_file_added_to_a_folder_it_wrote(tmp_path):
    out = tmp_path / "out"
    assert run(DEMO, "--out", out).exit_code == 0
    (out / "notes.txt").write_text("my notes")
    one_line_exit_2(run(DEMO, "--out", out, "--force"), "notes.txt")
    assert (out / "notes.txt").read_text() == "my notes"


def test_out_force_replaces_a_folder_it_wrote_and_an_empty_one(tmp_path):
    out, empty = tmp_path / "out", tmp_path / "empty"
    empty.mkdir()
    assert run(DEMO, "--out", empty).exit_code == 0 and written_whole(empty)
    assert run(DEMO, "--out", out).exit_code == 0 and written_whole(out)
    (out / "report.html").write_text("old")
    result = run(DEMO, "--out", out, "--force")
    assert result.exit_code == 0, result.stderr
    assert written_whole(out) and (out / "report.html").read_text() != "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "out"], "no temporary folder left"


def test_out_existing_folder_it_wrote_is_kept_without_force(tmp_path):
    out = tmp_path / "out"
    assert run(DEMO, "--out", out).exit_code == 0
    before = tree_hashes(out)
    one_line_exit_2(run(DEMO, "--out", out), "--force")
    assert tree_hashes(out) == before


def test_folder_exchange_swaps_two_folders_in_one_step(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "x").write_text("a")
    (b / "x").write_text("b")
    outputs.exchange(a, b)
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"


def test_out_force_works_where_the_os_cannot_exchange(tmp_path, monkeypatch):
    monkeypatch.setattr(outputs, "_renameat2", None)
    out = tmp_path / "out"
    assert run(DEMO, "--out", out).exit_code == 0
    (out / "report.html").write_text("old")
    assert run(DEMO, "--out", out, "--force").exit_code == 0
    assert written_whole(out) and (out / "report.html").read_text() != "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_failure_after_the_exchange_leaves_the_new_folder(tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert run(DEMO, "--out", out).exit_code == 0
    (out / "report.html").write_text("old")

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # as if killed while the old folder was being removed

    monkeypatch.setattr(outputs.shutil, "rmtree", crash)
    assert run(DEMO, "--out", out, "--force").exit_code != 0
    assert written_whole(out) and (out / "report.html").read_text() != "old"


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "nsys_collective", *args]


def test_three_concurrent_runs_to_one_new_folder_one_wins(tmp_path):
    out = tmp_path / "new"
    procs = [subprocess.Popen(_cli("analyze", str(DEMO), "--out", str(out)), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    done = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert sorted(rc for rc, _ in done) == [0, 2, 2], done
    for rc, err in done:
        if rc == 2:
            assert len(err.strip().splitlines()) == 1 and str(out) in err, err
    assert written_whole(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"], "no temporary folder left"


@pytest.mark.slow
@pytest.mark.serial  # kills runs at fractions of a timed run: other tests beside it would move those moments
def test_kill_9_at_any_point_leaves_the_old_or_the_new_folder_and_the_next_run_cleans_up(tmp_path):
    out = tmp_path / "out"
    assert subprocess.run(_cli("analyze", str(DEMO), "--out", str(out)), capture_output=True).returncode == 0
    started = time.monotonic()
    subprocess.run(_cli("analyze", str(DEMO), "--out", str(out), "--force"), capture_output=True, check=True)
    whole = time.monotonic() - started
    for k in range(4):
        proc = subprocess.Popen(_cli("analyze", str(DEMO), "--out", str(out), "--force"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(whole * (0.35 + 0.2 * k))  # from the analysis to the very end: 35%, 55%, 75%, 95%
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert written_whole(out), f"kill {k}: {sorted(p.name for p in out.rglob('*'))}"
    for leftover in tmp_path.iterdir():
        os.utime(leftover, (AGED, AGED))  # the killed runs are long gone
    assert subprocess.run(_cli("analyze", str(DEMO), "--out", str(out), "--force"), capture_output=True).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_out_leftovers_of_killed_runs_are_cleaned_but_nothing_else(tmp_path):
    out = tmp_path / "out"
    dead = tmp_path / ".out.ct-0123abcd.tmp"  # a temporary folder of a run killed long ago
    dead.mkdir()
    (dead / outputs.MARKER).write_text("")
    (dead / "report.html").write_text("half")
    busy = tmp_path / ".out.ct-89abcdef.tmp"  # one another run is still writing
    busy.mkdir()
    (busy / outputs.MARKER).write_text("")
    stranger = tmp_path / ".out.ct-deadbeef.tmp"  # our name, but not our folder
    stranger.mkdir()
    (stranger / "photo.jpg").write_text("not ours")
    look_alike = tmp_path / ".out.0123abcd"  # not our name
    look_alike.mkdir()
    # What versions before the marker left: mkdtemp names holding only files they write.
    legacy = tmp_path / ".out.k2j4_5g6"
    (legacy / "charts").mkdir(parents=True)
    (legacy / "analysis.json").write_text("{}")
    (legacy / "charts" / "timeline.png").write_text("")
    legacy_old = tmp_path / ".out.old.abcdefgh"
    (legacy_old / "out").mkdir(parents=True)
    (legacy_old / "out" / "report.html").write_text("")
    legacy_look_alike = tmp_path / ".out.zzzzzzzz"
    legacy_look_alike.mkdir()
    (legacy_look_alike / "photo.jpg").write_text("not ours")
    for p in (dead, busy, stranger, look_alike, legacy, legacy_old, legacy_look_alike):
        os.utime(p, (AGED, AGED))
    with open(busy / outputs.MARKER) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert run(DEMO, "--out", out).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", busy.name, stranger.name, look_alike.name,
                                                                 legacy_look_alike.name])


# --perfetto ------------------------------------------------------------------------------------

def test_perfetto_never_replaces_an_input(job):
    before = tree_hashes(job)
    for force in ([], ["--force"]):
        one_line_exit_2(run(job, "--perfetto", job / "rep_0.sqlite", *force), "rep_0.sqlite", "input")
    assert tree_hashes(job) == before


def test_perfetto_refuses_an_existing_file_without_force(tmp_path):
    trace = tmp_path / "job.trace.json"
    trace.write_text("keep")
    one_line_exit_2(run(DEMO, "--perfetto", trace), "--force")
    assert trace.read_text() == "keep"


def test_perfetto_force_never_replaces_a_file_it_did_not_write(tmp_path):
    trace = tmp_path / "job.trace.json"
    trace.write_text('{"traceEvents": []}')
    one_line_exit_2(run(DEMO, "--perfetto", trace, "--force"), "not written by collectivetrace-nsys")
    assert trace.read_text() == '{"traceEvents": []}'


def test_perfetto_force_replaces_its_own_trace(tmp_path):
    trace = tmp_path / "job.trace.json"
    assert run(DEMO, "--perfetto", trace).exit_code == 0
    first = trace.read_bytes()
    assert run(DEMO, "--perfetto", trace, "--force", "--ranks", "0-1").exit_code == 0
    assert trace.read_bytes() != first and json.loads(trace.read_text())["traceEvents"]
    assert [p.name for p in tmp_path.iterdir()] == ["job.trace.json"], "no temporary file left"


def _root_listing() -> list[str]:
    return sorted(os.listdir("/"))


def test_perfetto_into_a_missing_folder_is_one_line_exit_2(tmp_path):
    root = _root_listing()
    one_line_exit_2(run(DEMO, "--perfetto", tmp_path / "absent" / "x.json"), "absent")
    assert list(tmp_path.iterdir()) == [] and _root_listing() == root


def test_perfetto_onto_a_folder_is_one_line_exit_2(tmp_path):
    folder = tmp_path / "adir"
    folder.mkdir()
    root = _root_listing()
    for force in ([], ["--force"]):
        one_line_exit_2(run(DEMO, "--perfetto", folder, *force), "directory")
    assert [p.name for p in tmp_path.iterdir()] == ["adir"] and list(folder.iterdir()) == []
    assert _root_listing() == root


def test_perfetto_leftovers_of_killed_runs_are_cleaned(tmp_path):
    dead = tmp_path / ".job.trace.json.ct-0123abcd.tmp"
    dead.write_text('{"traceEvents": [')
    os.utime(dead, (AGED, AGED))
    assert run(DEMO, "--perfetto", tmp_path / "job.trace.json").exit_code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["job.trace.json"]


# Leftovers beside the inputs ----------------------------------------------------------------------

def test_interrupted_nsys_export_is_not_read_as_an_input(job):
    (job / ".rep_0.0123abcd.tmp.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 40)  # killed mid-export
    leftover_out = job / ".out.ct-0123abcd.tmp"
    leftover_out.mkdir()
    shutil.copy(job / "rep_0.sqlite", leftover_out / "rep_0.sqlite")
    result = run(job, "--json")
    assert result.exit_code == 0, result.stderr
    assert len(json.loads(result.stdout)["inputs"]) == 4


def test_stale_nsys_export_temporaries_are_cleaned_on_the_next_export(tmp_path):
    from nsys_collective.ingest.nsys_export import export_path_for, export_reports

    report = tmp_path / "r.nsys-rep"
    report.write_bytes(b"a report")
    nsys = tmp_path / "nsys"
    export = DEMO / "rep_0.sqlite"  # what nsys writes is checked: a whole export
    nsys.write_text(f'#!/bin/sh\nwhile [ $# -gt 1 ]; do [ "$1" = --output ] && out="$2"; shift; done\ncp "{export}" "$out"\n')
    nsys.chmod(0o755)
    cache = tmp_path / "cache"  # exports and their temporaries live in the tool's cache
    cache.mkdir()
    stem = export_path_for(report, cache).stem
    stale, fresh, other = (cache / f".{stem}.0123abcd.tmp.sqlite", cache / f".{stem}.89abcdef.tmp.sqlite",
                           cache / ".notes.0123abcd.tmp")
    for p in (stale, fresh, other):
        p.write_text("x")
    os.utime(stale, (AGED, AGED))
    os.utime(other, (AGED, AGED))
    [done] = export_reports([report], nsys=nsys, cache_dir=cache)
    assert sorted(p.name for p in cache.iterdir()) == sorted([fresh.name, other.name, done.name])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "nsys", "r.nsys-rep"]


# A read-only or full output filesystem (a small tmpfs in a private mount namespace) ---------------

def _in_small_tmpfs(tmp_path: Path, options: str, command: str) -> subprocess.CompletedProcess:
    """Run `command` (with $M the mount point) in a mount namespace where $M is a tmpfs."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a private tmpfs")
    mount = tmp_path / "mnt"
    mount.mkdir()
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {mount}"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private tmpfs here ({probe.stderr.decode().strip()}): a full or read-only "
                    "filesystem cannot be made")
    script = f"mount -t tmpfs -o {options} tmpfs {mount} && M={mount} && {command}"
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)


@pytest.mark.parametrize("what", ["--out", "--perfetto"])
def test_a_full_output_filesystem_is_one_line_exit_2(tmp_path, what):
    target = "$M/report" if what == "--out" else "$M/job.trace.json"
    proc = _in_small_tmpfs(tmp_path, "size=64k", f"{sys.executable} -m nsys_collective analyze {DEMO} {what} {target} "
                                                 ">/dev/null; rc=$?; echo left: $(ls -A $M); exit $rc")
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.strip() == "left:", "nothing half-written, no temporary left"
    assert len(proc.stderr.strip().splitlines()) == 1 and "No space left" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("what", ["--out", "--perfetto"])
def test_a_read_only_output_filesystem_is_one_line_exit_2(tmp_path, what):
    target = "$M/report" if what == "--out" else "$M/job.trace.json"
    proc = _in_small_tmpfs(tmp_path, "ro", f"{sys.executable} -m nsys_collective analyze {DEMO} {what} {target}")
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Read-only file system" in proc.stderr, proc.stderr


def test_out_below_a_file_is_one_line_exit_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    one_line_exit_2(run(DEMO, "--out", blocker / "report"), str(blocker))
    assert blocker.read_text() == "x"


def test_leftover_folders_are_never_jobs(tmp_path):
    from nsys_collective.ingest.discover import find_jobs

    shutil.copytree(DEMO, tmp_path / "job")
    shutil.copytree(DEMO, tmp_path / ".job.ct-0123abcd.tmp")  # an interrupted --out beside the job
    assert [p.name for p in find_jobs(tmp_path)] == ["job"]
    assert [p.name for p in find_jobs(tmp_path, "*")] == ["job"]
