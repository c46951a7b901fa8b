"""Never touch what the user owns, round two (issue 17): exports beside reports, chart files,
duplicate inputs, hostile rows, files that change under the reader. Each test shows the inputs'
hashes unchanged where the tool only reads."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import FIXTURES, fake_nsys, nsys_calls, sha256, tree_hashes
from nsys_collective.cli import app
from nsys_collective.errors import InputError, NsysExportError
from nsys_collective.ingest.nsys_export import export_reports

DEMO = FIXTURES / "demo-4rank-2host"
BALANCED = FIXTURES / "balanced-2rank"
EXPORT = DEMO / "rep_0.sqlite"
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_line_exit_2(result, *words):
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def analyzed_json(*args):
    result = cli("analyze", *args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


# 1. The export cache ---------------------------------------------------------------------------

def test_a_file_beside_the_report_named_like_its_export_is_never_written(tmp_path, monkeypatch):
    job = tmp_path / "job"
    job.mkdir()
    report = job / "rank0.nsys-rep"
    report.write_bytes(b"a report")
    mine = job / "rank0.sqlite"  # the user's own database, older than the report
    con = sqlite3.connect(mine)
    con.execute("CREATE TABLE notes (text)")
    con.execute("INSERT INTO notes VALUES ('mine')")
    con.commit()
    con.close()
    os.utime(mine, (1, 1))
    before = tree_hashes(job)
    nsys = fake_nsys(tmp_path, f'cp "{EXPORT}" "$out"\n')

    monkeypatch.setenv("COLLECTIVETRACE_CACHE", str(tmp_path / "cache"))  # the default cache, no --cache-dir
    doc = analyzed_json(report, "--nsys", nsys)

    assert tree_hashes(job) == before, "nothing beside the report may change"
    assert doc["inputs"][0]["export"].startswith(str(tmp_path / "cache"))
    assert sorted(p.name for p in job.iterdir()) == ["rank0.nsys-rep", "rank0.sqlite"]


def test_a_report_replaced_with_an_older_mtime_is_exported_again(tmp_path):
    report = tmp_path / "in" / "rank0.nsys-rep"
    report.parent.mkdir()
    report.write_bytes(b"first report")
    nsys = fake_nsys(tmp_path, f'cp "{EXPORT}" "$out"\n')
    cache = tmp_path / "cache"
    [first] = export_reports([report], nsys=nsys, cache_dir=cache)
    assert len(nsys_calls(tmp_path)) == 1
    assert export_reports([report], nsys=nsys, cache_dir=cache) == [first] and len(nsys_calls(tmp_path)) == 1

    other = tmp_path / "other.nsys-rep"
    other.write_bytes(b"other report")
    os.utime(other, (1, 1))
    shutil.copy2(other, report)  # cp -p: other content, an older mtime
    [second] = export_reports([report], nsys=nsys, cache_dir=cache)

    assert len(nsys_calls(tmp_path)) == 2 and second != first


def test_an_incomplete_export_from_an_nsys_that_says_success_is_never_cached(tmp_path):
    report = tmp_path / "rank0.nsys-rep"
    report.write_bytes(b"a report")
    half = EXPORT.stat().st_size // 2
    broken = fake_nsys(tmp_path, f'head -c {half} "{EXPORT}" > "$out"\n')
    cache = tmp_path / "cache"

    with pytest.raises(NsysExportError, match="incomplete or foreign"):
        export_reports([report], nsys=broken, cache_dir=cache)
    assert not any(cache.iterdir()), "nothing cached, no temporary left"

    good = fake_nsys(tmp_path, f'cp "{EXPORT}" "$out"\n')
    [export] = export_reports([report], nsys=good, cache_dir=cache)
    assert sha256(export) == sha256(EXPORT)


# 2. Chart files follow the output rules ----------------------------------------------------------

@pytest.fixture(scope="module")
def comparison():
    import nsys_collective as nc

    return nc.compare_runs(nc.load(str(BALANCED)), nc.load(str(BALANCED)))


def test_compare_chart_never_follows_a_link_nor_replaces_a_file_it_did_not_write(tmp_path, comparison):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    (tmp_path / "diff.svg").symlink_to(notes)

    with pytest.raises(InputError, match="exists"):
        comparison.chart(tmp_path / "diff.png")
    assert notes.read_text() == "my notes"
    assert not (tmp_path / "diff.png").exists(), "nothing written when one of the two is refused"
    with pytest.raises(InputError, match="not written by collectivetrace-nsys"):
        comparison.chart(tmp_path / "diff.png", force=True)
    assert notes.read_text() == "my notes" and (tmp_path / "diff.svg").is_symlink()


def test_compare_chart_needs_force_to_replace_its_own_and_an_existing_folder(tmp_path, comparison):
    with pytest.raises(InputError, match="no such folder"):
        comparison.chart(tmp_path / "missing" / "diff.png")
    assert not (tmp_path / "missing").exists()

    png, svg = comparison.chart(tmp_path / "diff.png")
    with pytest.raises(InputError, match="pass --force"):
        comparison.chart(tmp_path / "diff.png")
    assert comparison.chart(tmp_path / "diff.png", force=True) == [png, svg]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["diff.png", "diff.svg"]


def test_compare_chart_on_a_full_disk_leaves_nothing(tmp_path, comparison, monkeypatch):
    from matplotlib.figure import Figure

    def full(self, fname, **kwargs):
        Path(fname).write_bytes(b"")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", full)
    with pytest.raises(InputError, match="No space left"):
        comparison.chart(tmp_path / "diff.png")
    assert list(tmp_path.iterdir()) == []


def test_compare_cli_chart_refused_before_the_comparison(tmp_path):
    (tmp_path / "diff.png").write_text("not a chart")
    result = cli("compare", BALANCED, BALANCED, "--chart", tmp_path / "diff.png", "--force")
    one_line_exit_2(result, "diff.png", "not written by collectivetrace-nsys")
    assert (tmp_path / "diff.png").read_text() == "not a chart"


# 3. Inputs are opened so that nothing is created beside them --------------------------------------

def test_a_wal_mode_export_gets_nothing_created_beside_it(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    wal = job / "rank0.sqlite"
    shutil.copy(EXPORT, wal)
    con = sqlite3.connect(wal)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    con.close()
    assert sorted(p.name for p in job.iterdir()) == ["rank0.sqlite"]
    before = tree_hashes(job)

    analyzed_json(job)

    assert sorted(p.name for p in job.iterdir()) == ["rank0.sqlite"]
    assert tree_hashes(job) == before


# 4. One file reached twice is one input; two files claiming one rank are refused --------------------

def test_one_export_reached_twice_is_read_once_with_one_warning(tmp_path, monkeypatch):
    job = tmp_path / "job"
    shutil.copytree(BALANCED, job)
    files = sorted(job.glob("*.sqlite"))
    (job / "link.sqlite").symlink_to(files[0])
    os.link(files[1], job / "hard.sqlite")
    before = tree_hashes(job)
    expected = analyzed_json(BALANCED)

    monkeypatch.chdir(tmp_path)
    doc = analyzed_json(job, Path("job") / files[0].name)  # and x beside /abs/x

    assert len(doc["ranks"]) == len(expected["ranks"])
    assert doc["summary"]["wait_ns"] == expected["summary"]["wait_ns"]
    said = [w for w in doc["warnings"] if "read once" in w]
    assert len(said) == 1, doc["warnings"]
    assert tree_hashes(job) == before


def test_two_files_claiming_one_rank_are_refused_naming_both(tmp_path):
    job = tmp_path / "job"
    shutil.copytree(BALANCED, job)
    first = sorted(job.glob("*.sqlite"))[0]
    shutil.copy(first, job / "copy.sqlite")  # another inode, the same capture

    line = one_line_exit_2(cli("analyze", job), str(first.name), "copy.sqlite", "both claim")
    assert "rank" in line


def test_files_of_two_jobs_mixed_are_refused(tmp_path):
    line = one_line_exit_2(cli("analyze", BALANCED, DEMO), "both claim")
    assert "two jobs" in line


# 5, 7. Hostile ids: dropped with a counted warning, never a phantom rank nor an internal error -----

def hostile(tmp_path: Path, sql: str) -> Path:
    job = tmp_path / "job"
    shutil.copytree(BALANCED, job)
    target = sorted(job.glob("*.sqlite"))[0]
    con = sqlite3.connect(target)
    # The nsys schema declares these columns NOT NULL; a copy without constraints takes anything.
    con.executescript(f"CREATE TABLE k AS SELECT * FROM {KERNEL}; DROP TABLE {KERNEL}; ALTER TABLE k RENAME TO {KERNEL};")
    con.execute(sql)
    con.commit()
    con.close()
    return job


@pytest.mark.parametrize("sql", [
    f"UPDATE {KERNEL} SET deviceId = 2147483648 WHERE rowid % 3 = 0",
    f"UPDATE {KERNEL} SET deviceId = 4294967295 WHERE rowid = 1",
    f"UPDATE {KERNEL} SET deviceId = -1 WHERE rowid = 1",
    f"UPDATE {KERNEL} SET globalPid = -1 WHERE rowid % 4 = 0",
    f"UPDATE {KERNEL} SET globalPid = 4611686018427387904 WHERE rowid % 4 = 0",
    f"UPDATE {KERNEL} SET globalPid = NULL WHERE rowid = 1",
    f"UPDATE {KERNEL} SET streamId = 9223372036854775807 WHERE rowid = 1",
], ids=["device-2^31", "device-cupti-invalid", "device-minus-1", "pid-minus-1", "pid-2^62", "pid-null", "stream-huge"])
def test_out_of_range_ids_are_dropped_and_counted(tmp_path, sql):
    job = hostile(tmp_path, sql)
    target = sorted(job.glob("*.sqlite"))[0]
    con = sqlite3.connect(target)
    where = sql.split(" WHERE ")[1]
    bad = con.execute(f"SELECT count(*) FROM {KERNEL} WHERE {where}").fetchone()[0]
    con.close()
    expected = analyzed_json(BALANCED)

    doc = analyzed_json(job)

    assert len(doc["ranks"]) == len(expected["ranks"]), "no phantom rank"
    said = [w for w in doc["warnings"] if "out-of-range device, process or stream id" in w]
    assert len(said) == 1 and said[0].split(": ")[1].startswith(f"{bad} kernels rows"), doc["warnings"]


# 6. A file truncated under the reader --------------------------------------------------------------

def test_an_export_rewritten_while_it_is_read_is_an_error_never_a_crash(tmp_path):
    export = tmp_path / "x.sqlite"
    data = EXPORT.read_bytes()
    export.write_bytes(data)
    code = textwrap.dedent(f"""\
        import time
        from nsys_collective import _native
        stop = time.monotonic() + 8
        while time.monotonic() < stop:
            try:
                _native.read_exports([{str(export)!r}] * 8, 8)
            except Exception as e:
                assert "\\n" not in str(e), e
        """)
    reader = subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    try:
        while reader.poll() is None:  # cp new.sqlite old.sqlite, again and again
            with open(export, "r+b") as f:
                f.truncate(len(data) // 3)
                time.sleep(0.001)
                f.seek(0)
                f.write(data)
    finally:
        reader.wait()
    assert reader.returncode == 0, (reader.returncode, reader.stderr.read()[-2000:])


# 8. Paths that are no UTF-8 ----------------------------------------------------------------------------

NON_UTF8 = os.fsdecode(b"job-\xff")


def test_batch_stores_the_good_jobs_beside_a_folder_whose_name_is_no_utf8(tmp_path):
    root = tmp_path / "root"
    shutil.copytree(BALANCED, root / NON_UTF8)
    shutil.copytree(BALANCED, root / "good")
    before = tree_hashes(root)
    db = tmp_path / "runs.db"

    result = cli("batch", root, "--db", f"sqlite:///{db}")

    assert result.exit_code == 0, result.stderr + result.stdout
    from nsys_collective.store import list_runs, open_store

    engine = open_store(f"sqlite:///{db}")
    jobs = sorted(r["job"] for r in list_runs(engine) if r["status"] == "ok")
    engine.dispose()
    assert jobs == ["good", "job-\\xff"]
    assert tree_hashes(root) == before


def test_analyze_out_and_perfetto_of_inputs_whose_path_is_no_utf8(tmp_path):
    job = tmp_path / NON_UTF8
    shutil.copytree(BALANCED, job)
    result = cli("analyze", job, "--out", tmp_path / "out", "--perfetto", tmp_path / "t.json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads((tmp_path / "out" / "analysis.json").read_text(encoding="utf-8"))
    assert all("\\xff" in i["path"] for i in doc["inputs"])


# 9. Non-regular files, nsys's timeout and interrupts -------------------------------------------------

def test_a_fifo_named_like_an_export_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "x.sqlite"
    os.mkfifo(fifo)
    proc = subprocess.run([sys.executable, "-m", "nsys_collective", "analyze", str(fifo)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1

    job = tmp_path / "job"
    shutil.copytree(BALANCED, job)
    os.mkfifo(job / "y.sqlite")  # in a folder: not an input
    proc = subprocess.run([sys.executable, "-m", "nsys_collective", "analyze", str(job), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.stat(job / "y.sqlite").st_mode)


def _stubborn_nsys(tmp_path: Path) -> Path:
    """An nsys that ignores SIGINT and SIGTERM, and starts a child that does too (its pid in
    child.pid): only a SIGKILL to the process group ends them."""
    return fake_nsys(tmp_path, f"""\
        trap '' INT TERM
        sh -c "trap '' INT TERM; echo \\$\\$ > {tmp_path / 'child.pid'}; while :; do sleep 0.1; done" &
        while :; do sleep 0.1; done
        """)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie of ours is gone too.
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def test_nsys_export_has_a_timeout_and_its_process_group_is_killed(tmp_path):
    report = tmp_path / "rank0.nsys-rep"
    report.write_bytes(b"a report")
    nsys = _stubborn_nsys(tmp_path)
    started = time.monotonic()

    result = cli("analyze", report, "--nsys", nsys, "--cache-dir", tmp_path / "cache", "--export-timeout", 1)

    one_line_exit_2(result, "did not finish within 1 s", "--export-timeout")
    assert time.monotonic() - started < 30
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(child), "nsys's child must be killed with its group"
    assert not list((tmp_path / "cache").glob(".*")), "no temporary left"


def test_an_interrupt_kills_a_running_nsys_that_ignores_it(tmp_path):
    report = tmp_path / "rank0.nsys-rep"
    report.write_bytes(b"a report")
    nsys = _stubborn_nsys(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "nsys_collective", "analyze", str(report), "--nsys", str(nsys),
                             "--cache-dir", str(tmp_path / "cache")], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "child.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("analyze hung on an nsys that ignores SIGINT")
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(child)
    assert proc.returncode != 0


# 10. Step ranges: a warning lists a few items -------------------------------------------------------

def test_a_steps_warning_lists_a_few_steps_and_counts_the_rest():
    from nsys_collective.model.job import steps_warning
    from nsys_collective.model.steps import LeftOut, StepSelection

    steps = tuple(f"ProfilerStep#{i}" for i in range(5000))
    left_out = tuple(LeftOut(s, "missing", tuple(range(64))) for s in steps[1:])
    selection = StepSelection(pattern="ProfilerStep#*", complete_only=True, restricts=True, steps=steps,
                              kept=steps[:1], left_out=left_out)

    said = steps_warning(selection, 10, 20)

    assert len(said) < 600, len(said)
    assert "4996 more" in said and "and 56 more" in said


# Cosmetic: refused before anything is written ----------------------------------------------------

def test_out_and_perfetto_naming_one_path_are_refused_before_writing(tmp_path):
    target = tmp_path / "P"
    one_line_exit_2(cli("analyze", BALANCED, "--out", target, "--perfetto", target), "--perfetto", "--out")
    assert not target.exists()
    one_line_exit_2(cli("analyze", BALANCED, "--out", target, "--perfetto", target / "t.json"), "--perfetto")
    assert not target.exists()


def test_an_empty_path_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copytree(BALANCED, tmp_path / "here")
    monkeypatch.chdir(tmp_path / "here")
    one_line_exit_2(cli("analyze", ""), "empty path")
    import nsys_collective as nc

    with pytest.raises(InputError, match="empty path"):
        nc.load("")
