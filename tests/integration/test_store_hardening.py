"""The results store: bare paths are files of exactly that name, only a store is ever written as
one, the store is never an input, store failures are retried, and every store problem is one
line, exit 2 (issue 13, items 5 and 6)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import FIXTURES, gen, sha256
from nsys_collective.cli import app
from nsys_collective.store import list_runs, open_store

runner = CliRunner()


def cli(*args):
    return runner.invoke(app, list(map(str, args)))


def one_line_exit_2(result, *words):
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Background on this error" not in result.output and "[SQL:" not in result.output
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> Path:
    """A batch root with two small generated jobs."""
    root = tmp_path_factory.mktemp("root")
    gen.generate(root / "jobA", ranks=2, hosts=1, steps=3, kernels_per_step=20, buckets=2, scenario="slow_kernel", seed=1)
    gen.generate(root / "jobB", ranks=2, hosts=1, steps=3, kernels_per_step=20, buckets=2, scenario="late_launch", seed=2)
    return root


@pytest.fixture
def root(jobs, tmp_path) -> Path:
    copy = tmp_path / "root"
    shutil.copytree(jobs, copy)
    return copy


@pytest.mark.parametrize("name", ["we?ird.db", "pct%41.db", "hash#1.db", "sp ace.db"])
def test_a_bare_db_path_is_a_file_of_exactly_that_name(root, tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    result = cli("batch", root, "--db", name)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".db") == [name]
    [run] = [r for r in list_runs(open_store(name)) if r["job"] == "jobA"]
    assert cli("report", run["id"], "--db", name, "--out", tmp_path / "out").exit_code == 0
    assert cli("compare", run["id"], run["id"], "--db", tmp_path / name).exit_code == 0


def test_a_db_that_is_an_nsys_export_is_refused_and_left_unchanged(root, tmp_path):
    export = tmp_path / "export.sqlite"
    shutil.copy(FIXTURES / "demo-4rank-2host" / "rep_0.sqlite", export)
    before = sha256(export)
    one_line_exit_2(cli("batch", root, "--db", export), str(export), "Nsight Systems export")
    one_line_exit_2(cli("batch", root, "--db", f"sqlite:///{export}"), "Nsight Systems export")
    one_line_exit_2(cli("report", "1", "--db", export, "--out", tmp_path / "out"), "Nsight Systems export")
    one_line_exit_2(cli("compare", "1", "2", "--db", export), "Nsight Systems export")
    assert sha256(export) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.sqlite", "root"], "no -wal or -shm file either"


def test_a_db_that_is_some_other_sqlite_file_is_refused(root, tmp_path):
    other = tmp_path / "notes.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE runs (x)")  # even a table named like ours
        db.execute("CREATE TABLE notes (text)")
    db.close()
    before = sha256(other)
    one_line_exit_2(cli("batch", root, "--db", other), str(other), "not a results store")
    one_line_exit_2(cli("compare", "1", "2", "--db", other), "not a results store")
    assert sha256(other) == before
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"x" * 5000)
    one_line_exit_2(cli("batch", root, "--db", garbage), str(garbage))
    assert garbage.read_bytes() == b"x" * 5000


def test_an_empty_file_becomes_a_store(root, tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    assert cli("batch", root, "--db", empty).exit_code == 0


def test_a_store_inside_the_batch_root_is_never_a_job(root):
    for db in (root / "results.sqlite", root / "jobA" / "store.sqlite"):
        first = cli("batch", root, "--db", db)
        assert first.exit_code == 0, first.output
        again = cli("batch", root, "--db", db)
        assert again.exit_code == 0, again.output
        assert "2 jobs: 0 analyzed, 2 skipped" in again.stdout, again.stdout


def test_a_store_named_as_an_input_is_refused_saying_so(root):
    db = root / "results.sqlite"
    assert cli("batch", root, "--db", db).exit_code == 0
    one_line_exit_2(cli("analyze", db), str(db), "results store")


def test_a_store_failure_is_retried_on_the_next_run(root, tmp_path, monkeypatch):
    import nsys_collective.batch as batch
    from sqlalchemy.exc import OperationalError

    url = f"sqlite:///{tmp_path / 'store.db'}"
    real = batch.write_run

    def full_disk(engine, job, inputs, input_hash, result, **kw):
        if not isinstance(result, str) and Path(job).name == "jobA":
            raise OperationalError("INSERT INTO runs ...", {}, sqlite3.OperationalError("database or disk is full"))
        return real(engine, job, inputs, input_hash, result, **kw)

    monkeypatch.setattr(batch, "write_run", full_disk)
    first = cli("batch", root, "--db", url)
    assert first.exit_code == 1 and "database or disk is full" in first.stderr
    monkeypatch.setattr(batch, "write_run", real)
    again = cli("batch", root, "--db", url)  # space is back: no --retry-failed needed
    assert again.exit_code == 0, again.output
    assert "1 analyzed, 1 skipped" in again.stdout
    assert {r["job"]: r["status"] for r in list_runs(open_store(url))} == {"jobA": "ok", "jobB": "ok"}


def test_a_store_that_cannot_be_written_at_all_is_one_line_exit_2(root, tmp_path, monkeypatch):
    import nsys_collective.batch as batch
    from sqlalchemy.exc import OperationalError

    def full_disk(*args, **kwargs):
        raise OperationalError("INSERT INTO runs (job, ...)\nVALUES (?, ...)", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr(batch, "write_run", full_disk)
    one_line_exit_2(cli("batch", root, "--db", tmp_path / "store.db"), "database or disk is full")


def test_a_store_on_a_full_filesystem_is_one_line_exit_2_and_retried_once_space_returns(root, tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a private tmpfs")
    mount, py = tmp_path / "mnt", f"{sys.executable} -m nsys_collective batch {root} --db {tmp_path}/mnt/store.db"
    mount.mkdir()
    script = f"""
        mount -t tmpfs -o size=4m tmpfs {mount} || exit 99
        {py} --pattern jobA > /dev/null 2>&1 || exit 98
        # A reader keeps the store's -wal and -shm files open, so the store opens on a full disk.
        {sys.executable} -c "import sqlite3, time; c = sqlite3.connect('{mount}/store.db'); \
            c.execute('SELECT count(*) FROM runs').fetchall(); time.sleep(300)" &
        holder=$!
        sleep 2
        dd if=/dev/zero of={mount}/fill bs=4k > /dev/null 2>&1
        {py} > /dev/null 2> {tmp_path}/full.err; echo "full=$?"
        kill $holder
        rm {mount}/fill
        {py} > {tmp_path}/again.out 2>&1; echo "again=$?"
        """
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True)
    if proc.returncode == 99 or "unshare failed" in proc.stderr:
        pytest.skip(f"cannot mount a private tmpfs here ({proc.stderr.strip()})")
    assert proc.returncode == 0 and proc.stdout.split() == ["full=2", "again=0"], proc.stdout + proc.stderr
    [line] = (tmp_path / "full.err").read_text().strip().splitlines()
    assert line.startswith("error: ") and "full" in line
    assert "1 analyzed, 1 skipped" in (tmp_path / "again.out").read_text()


@pytest.mark.parametrize("url, words", [
    ("bogus://x", "bogus"),
    ("postgresql+asyncpg://me@localhost/db", "asyncpg"),
    ("mysql+mysqldb://me@localhost/db", "MySQLdb"),
])
def test_a_bad_url_or_missing_driver_is_one_line_exit_2(root, tmp_path, url, words):
    one_line_exit_2(cli("compare", "1", "2", "--db", url), words)
    one_line_exit_2(cli("report", "1", "--db", url, "--out", tmp_path / "out"), words)
    one_line_exit_2(cli("batch", root, "--db", url), words)
