"""`batch` into the results store: every good job stored as `analyze --json` would print it, a
broken one recorded, reruns skip, PostgreSQL equals SQLite, two writers at once lose nothing, and
the Dask executor equals the local one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text
from typer.testing import CliRunner

from conftest import REAL, ROOT, gen, needs_real
from nsys_collective.batch import run_batch
from nsys_collective.ingest.discover import find_jobs
from nsys_collective.cli import app
from nsys_collective.store import AlreadyStored, list_runs, load_result, open_store, write_run
from nsys_collective.store.schema import Base, Run

runner = CliRunner()
JOBS = {  # job folder -> generator arguments (small: 3 steps of 28 kernels)
    "jobA": dict(ranks=4, hosts=2, scenario="slow_kernel", seed=1),
    "jobB": dict(ranks=3, hosts=1, scenario="contention", seed=2),
    "nested/jobC": dict(ranks=4, hosts=2, scenario="late_launch", seed=3),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Path:
    """A cluster folder: three generated jobs and a broken one (an empty and a truncated export)."""
    root = tmp_path_factory.mktemp("cluster")
    for name, args in JOBS.items():
        gen.generate(root / name, steps=3, kernels_per_step=28, buckets=2, **args)
    broken = root / "broken"
    broken.mkdir()
    (broken / "rep_0.sqlite").write_bytes(b"")
    good = (root / "jobA" / "rep_1.sqlite").read_bytes()
    (broken / "rep_1.sqlite").write_bytes(good[: len(good) // 3])
    return root


@pytest.fixture(scope="module")
def local_store(cluster, tmp_path_factory) -> str:
    """The batch of `cluster` through the CLI, local executor, into a fresh SQLite store."""
    url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'local.db'}"
    result = runner.invoke(app, ["batch", str(cluster), "--db", url])
    assert result.exit_code == 1, result.output
    return url


def batch(*args: str):
    return runner.invoke(app, ["batch", *args])


def by_job(url: str) -> dict[str, dict]:
    return {r["job"]: r for r in list_runs(open_store(url))}


def test_find_jobs(cluster):
    assert [p.relative_to(cluster).as_posix() for p in find_jobs(cluster)] == ["broken", "jobA", "jobB", "nested/jobC"]
    assert [p.name for p in find_jobs(cluster, "job*")] == ["jobA", "jobB"]


def test_batch_stores_every_good_job_and_records_the_broken_one(cluster, local_store):
    runs = by_job(local_store)
    assert sorted(runs) == ["broken", "jobA", "jobB", "nested/jobC"]
    bad = runs.pop("broken")
    assert bad["status"] == "failed" and "empty file" in bad["error"] and bad["ranks"] is None
    engine = open_store(local_store)
    for name, run in runs.items():
        assert run["status"] == "ok" and run["error"] is None and run["ranks"] == JOBS[name]["ranks"]
        # Exactly what `analyze JOB --json` prints for the same job folder.
        analyzed = runner.invoke(app, ["analyze", run["job_path"], "--json"])
        assert analyzed.exit_code == 0, analyzed.output
        doc = load_result(local_store, run["id"]).doc
        assert doc == json.loads(analyzed.stdout)
        assert run["collectives"] == doc["summary"]["collectives"] and run["wait_ns"] == doc["summary"]["wait_ns"]
        with engine.connect() as conn:
            count = lambda table: conn.scalar(text(f"SELECT COUNT(*) FROM {table} WHERE run_id = {run['id']}"))  # noqa: E731
            assert count("ranks") == len(doc["ranks"]) and count("collectives") == len(doc["collectives"])
            assert count("blame") == sum(len(c["blame"] or []) for c in doc["collectives"]) > 0
            assert count("blocking") == len(doc["blocking_kernels"]) + len(doc["blocking_launches"])
            assert count("contention") == len(doc["contention"])
            assert count("alignment_hosts") == len(doc["alignment"]["hosts"])
    with pytest.raises(Exception, match="failed, it has no results"):
        load_result(local_store, bad["id"])


def test_rerun_skips_what_is_stored(cluster, local_store, tmp_path):
    before = list_runs(open_store(local_store))
    result = batch(str(cluster), "--db", local_store)
    assert result.exit_code == 1, result.output
    assert "0 analyzed, 3 skipped (already stored), 1 failed" in result.stdout
    assert "failed: broken: " in result.stderr and "empty file" in result.stderr
    assert list_runs(open_store(local_store)) == before  # no new rows

    # A changed job is analyzed again (its old run stays); a failed one only when asked.
    copy = tmp_path / "cluster"
    shutil.copytree(cluster, copy)
    url = f"sqlite:///{tmp_path / 'copy.db'}"
    assert batch(str(copy), "--db", url).exit_code == 1
    gen.generate(copy / "jobB", steps=3, kernels_per_step=28, buckets=2, **{**JOBS["jobB"], "seed": 7}, force=True)
    result = batch(str(copy), "--db", url, "--retry-failed")
    assert result.exit_code == 1 and "1 analyzed, 2 skipped (already stored), 1 failed" in result.stdout
    runs = list_runs(open_store(url))
    assert [r["status"] for r in runs if r["job"] == "jobB"] == ["ok", "ok"]
    assert [r["status"] for r in runs if r["job"] == "broken"] == ["failed"]  # replaced, not added


def test_unusable_root_or_store_exits_2(tmp_path, cluster):
    result = batch(str(tmp_path / "missing"), "--db", f"sqlite:///{tmp_path / 's.db'}")
    assert result.exit_code == 2 and "not a directory" in result.stderr
    result = batch(str(tmp_path), "--db", f"sqlite:///{tmp_path / 's.db'}")
    assert result.exit_code == 2 and "no jobs found" in result.stderr
    result = batch(str(cluster), "--db", f"sqlite:///{tmp_path / 'no' / 'such' / 'folder.db'}")
    assert result.exit_code == 2 and "cannot open the results store" in result.stderr


def rows(url: str) -> dict[str, list]:
    """Every table's rows, ids and timestamps left out, each row naming its run's job path."""
    engine = create_engine(url)
    out = {}
    with engine.connect() as conn:
        job_of = dict(conn.execute(select(Run.id, Run.job_path)).all())
        for table in Base.metadata.sorted_tables:
            found = []
            for row in conn.execute(table.select()).mappings():
                row = {k: v for k, v in row.items() if k not in ("id", "created_at")}
                if "run_id" in row:
                    row["run_id"] = job_of[row["run_id"]]
                found.append(row)
            out[table.name] = sorted(found, key=repr)
    engine.dispose()
    return out


@pytest.fixture
def postgres_url():
    """A fresh database on the throwaway PostgreSQL server of scripts/postgres.sh (which installs
    and starts it); dropped afterwards."""
    name = f"ct_test_{uuid.uuid4().hex[:12]}"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), name], capture_output=True, text=True, timeout=600)
    if proc.returncode == 3:
        pytest.skip(f"no PostgreSQL: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    url = proc.stdout.strip().splitlines()[-1]
    yield url
    admin = create_engine(url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def test_postgres_store_holds_the_same_rows_as_sqlite(cluster, local_store, postgres_url):
    result = batch(str(cluster), "--db", postgres_url)
    assert result.exit_code == 1, result.output
    assert rows(postgres_url) == rows(local_store)
    run = by_job(postgres_url)["jobA"]
    assert load_result(postgres_url, run["id"]).doc == load_result(local_store, by_job(local_store)["jobA"]["id"]).doc
    assert batch(str(cluster), "--db", postgres_url).stdout.count("skipped") >= 3  # resumable there too


def test_two_batches_writing_one_store_at_once_lose_nothing(cluster, tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    command = [sys.executable, "-m", "nsys_collective", "batch", str(cluster), "--db", url]
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert proc.returncode == 1, err  # the broken job, nothing else
        assert "locked" not in err and "internal error" not in err and "failed: broken:" in err
    runs = list_runs(open_store(url))
    assert sorted((r["job"], r["status"]) for r in runs) == [
        ("broken", "failed"), ("jobA", "ok"), ("jobB", "ok"), ("nested/jobC", "ok")]


def test_a_lost_write_race_is_already_stored(local_store, tmp_path):
    """Both writers analyzed the job; the second insert hits the unique (job, inputs, status)."""
    result = load_result(local_store, by_job(local_store)["jobA"]["id"])
    engine = open_store(f"sqlite:///{tmp_path / 'race.db'}")
    first = write_run(engine, tmp_path / "jobA", [], "0" * 64, result)
    with pytest.raises(AlreadyStored) as lost:
        write_run(engine, tmp_path / "jobA", [], "0" * 64, result)
    assert lost.value.run_id == first and len(list_runs(engine)) == 1


def test_dask_executor_equals_local(cluster, local_store, tmp_path):
    from distributed import Client, LocalCluster

    url = f"sqlite:///{tmp_path / 'dask.db'}"
    # Two single-thread workers on loopback: ranks read on one are analyzed on the other, serialized.
    with LocalCluster(host="127.0.0.1", protocol="tcp://", processes=False, n_workers=2, threads_per_worker=1,
                      dashboard_address=None) as dask_cluster, Client(dask_cluster) as client:
        summary = run_batch(cluster, url, executor="dask", client=client)
    assert (summary["analyzed"], summary["failed"]) == (3, 1)
    assert rows(url) == rows(local_store)


@needs_real(REAL / "fs24-ring-6rank-2node")
def test_dask_executor_equals_local_on_real_exports(tmp_path):
    """Real exports hold what the generator never writes: traced on workers, the same results."""
    local = run_batch(REAL, f"sqlite:///{tmp_path / 'l.db'}", "fs24-*")
    dask = run_batch(REAL, f"sqlite:///{tmp_path / 'd.db'}", "fs24-*", executor="dask", threads=2)
    assert local["analyzed"] == dask["analyzed"] == 2
    assert rows(f"sqlite:///{tmp_path / 'd.db'}") == rows(f"sqlite:///{tmp_path / 'l.db'}")


def test_a_job_of_many_ranks_stores_what_analyze_prints_with_both_executors(tmp_path):
    """20 ranks, mapped a few at a time locally and one task per rank on Dask: the stored document
    equals `analyze JOB --json`."""
    job = tmp_path / "root" / "big"
    gen.generate(job, ranks=20, hosts=4, steps=3, kernels_per_step=28, buckets=2, scenario="slow_kernel", seed=44)
    expected = json.loads(CliRunner().invoke(app, ["analyze", str(job), "--json"]).stdout)
    for executor in ("local", "dask"):
        url = f"sqlite:///{tmp_path / executor}.db"
        run_batch(tmp_path / "root", url, executor=executor)
        engine = open_store(url)
        [run] = list_runs(engine)
        stored = load_result(engine, run["id"]).doc
        assert stored["collectives"] == expected["collectives"] and stored["blocking_kernels"] == expected["blocking_kernels"], executor


def test_batch_finds_and_stores_kineto_jobs(tmp_path):
    """Folders of PyTorch profiler traces are jobs too (the format registry), stored as analyze prints them."""
    root = tmp_path / "root"
    gen.generate(root / "traces", ranks=2, hosts=1, steps=2, kernels_per_step=28, buckets=2, scenario="slow_kernel",
                 seed=5, format="kineto")
    (root / "traces" / "truth.json").rename(tmp_path / "truth.json")  # a stray JSON is no input either way
    assert find_jobs(root) == [root.resolve() / "traces"]
    url = f"sqlite:///{tmp_path / 'k.db'}"
    summary = run_batch(root, url)
    assert (summary["analyzed"], summary["failed"]) == (1, 0), summary["errors"]
    [run] = list_runs(open_store(url))
    expected = json.loads(runner.invoke(app, ["analyze", str(root / "traces"), "--json"]).stdout)
    assert load_result(url, run["id"]).doc == expected and expected["summary"]["ranks"] == 2
