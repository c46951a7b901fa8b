"""`batch`: every job under a folder analyzed into the results store (store.py).

A job is a folder of rank reports or exports. Each is analyzed exactly as `analyze JOB --json`
does (same functions, same arguments), so a stored document equals that command's output. A job
already stored with the same input hash is skipped, and so is one that failed with the same
inputs under this tool version (unless retry_failed). A broken job is recorded with its error
and the batch goes on. Only the calling process writes to the store.

Executors:
* local: jobs one after another, each job's ranks read by the native reader in parallel.
* dask: a task per rank (export a report if need be, read it, drop the columns the analysis never
  reads), then a task per job that analyzes those ranks; a few jobs in flight at once. Without a
  scheduler address, an in-process LocalCluster on 127.0.0.1. The job task holds all its ranks'
  exports (blame needs every rank's GPU work); they are released once the job is done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from nsys_collective.analysis import analyze_exports
from nsys_collective.errors import InputError
from nsys_collective.inputs import EXPORT_SUFFIXES, REPORT_SUFFIXES, ExportSource, discover, exports_of, read_inputs
from nsys_collective.json_output import document
from nsys_collective.reader import Export
from nsys_collective.store import (AlreadyStored, display_url, input_hash, list_runs, open_store, stored_failure,
                                   stored_hash, write_run)

EXECUTORS = ("local", "dask")

# Table columns the analysis never reads: a dask rank task drops them before its export travels
# to the job task. The dask-equals-local tests guard this list.
# Jobs of more ranks are analyzed with their exports read on demand, a few held at a time, so a
# job's memory does not grow with its ranks' events (some exports are read twice instead).
BOUNDED_FROM_RANKS = 16
EXPORTS_HELD = 4

UNUSED_COLUMNS = {
    "kernels": ("block_x", "block_y", "block_z", "registers", "static_shared_memory", "dynamic_shared_memory"),
    "memcpy": ("bytes", "kind"),
    "memset": ("bytes", "kind"),
    "nvtx": ("domain",),
    "gpus": ("bus_location",),
}


@dataclass
class Job:
    name: str  # the folder relative to ROOT
    path: Path  # absolute: the store's key for the job, and what the analysis is given
    inputs: list[Path] = dataclasses.field(default_factory=list)
    input_hash: str = ""
    error: str | None = None  # its inputs could not even be listed


@dataclass
class _Failed:
    """A failure as a value: picklable (the native InputError is not), kept in input order."""

    error: str


def _error_text(e: BaseException) -> str:
    return str(e) if isinstance(e, InputError) else f"{type(e).__name__}: {e}"


def find_jobs(root: str | os.PathLike, pattern: str | None = None) -> list[Path]:
    """The job folders under root, sorted, absolute. With `pattern`: the folders matching that glob
    relative to root. Without: every folder directly holding exports or reports, not looking
    further into it (its subfolders are part of it, as `analyze FOLDER` reads them too)."""
    root = Path(root)
    if not root.is_dir():
        raise InputError(f"{root}: not a directory")
    root = root.resolve()
    if pattern:
        return sorted({p for p in root.glob(pattern) if p.is_dir()})
    jobs = []
    for folder, subfolders, files in os.walk(root):
        subfolders.sort()
        if any(f.endswith(EXPORT_SUFFIXES + REPORT_SUFFIXES) for f in files):
            jobs.append(Path(folder))
            subfolders.clear()
    return sorted(jobs)


def _prepare(root: Path, path: Path) -> Job:
    job = Job(name=path.relative_to(root).as_posix() if path != root else root.name, path=path)
    try:
        job.inputs = discover([path])
        job.input_hash = input_hash(path, job.inputs)
    except Exception as e:
        job.error, job.input_hash = _error_text(e), input_hash(path, [])
    return job


def _document(exports: list[Export], inputs: Sequence[Path | str], export_paths: Sequence[Path | str]) -> dict:
    """What `analyze JOB --json` prints, as a dict."""
    analysis = analyze_exports(exports, [str(p) for p in inputs])
    return document(analysis, [str(p) for p in export_paths])


class _Bars:
    """Progress on stderr: jobs done, ranks read. Does nothing when not enabled."""

    def __init__(self, enabled: bool, jobs: int):
        self.progress = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            from nsys_collective.console import stderr

            self.progress = Progress(TextColumn("{task.description:>5}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), console=stderr, transient=True)
            self.jobs = self.progress.add_task("jobs", total=jobs)
            self.ranks = self.progress.add_task("ranks", total=0)

    def __enter__(self):
        if self.progress:
            self.progress.start()
        return self

    def __exit__(self, *exc):
        if self.progress:
            self.progress.stop()

    def ranks_queued(self, n: int) -> None:
        if self.progress:
            self.progress.update(self.ranks, total=self.progress.tasks[self.ranks].total + n)

    def ranks_read(self, n: int = 1) -> None:
        if self.progress:
            self.progress.advance(self.ranks, n)

    def job_done(self) -> None:
        if self.progress:
            self.progress.advance(self.jobs)


def _run_local(jobs: Iterable[Job], bars: _Bars, nsys, cache_dir, threads) -> Iterator[tuple[Job, dict | str]]:
    """Each job's document (or error text), one job after another."""
    chunk = 4 * (threads or os.cpu_count() or 1)  # ranks read per native call: progress without losing parallelism
    for job in jobs:
        bars.ranks_queued(len(job.inputs))
        try:
            paths = exports_of(job.inputs, nsys, cache_dir)
            if len(paths) > BOUNDED_FROM_RANKS:
                exports = ExportSource(paths, keep=EXPORTS_HELD)
                bars.ranks_read(len(paths))
            else:
                exports = []
                for at in range(0, len(paths), chunk):
                    exports += read_inputs(paths[at:at + chunk], threads)
                    bars.ranks_read(len(paths[at:at + chunk]))
            result = _document(exports, job.inputs, paths)
        except Exception as e:
            result = _error_text(e)
        exports = []  # released before the next job is read
        yield job, result


def _reduced(export: Export) -> Export:
    return dataclasses.replace(export, **{
        table: {k: v for k, v in getattr(export, table).items() if k not in drop} for table, drop in UNUSED_COLUMNS.items()})


def _rank_task(path: str, nsys: str | None, cache_dir: str | None, keep: bool = True) -> tuple[str, Export | None] | _Failed:
    """Dask task: one rank's export path and reduced export (or, for a large job, only the path
    of an export that was read once, so that the job's analysis reads it on demand)."""
    try:
        [export_path] = exports_of([Path(path)], nsys, Path(cache_dir) if cache_dir else None)
        [export] = read_inputs([export_path], 1)
        return str(export_path), _reduced(export) if keep else None
    except Exception as e:
        return _Failed(_error_text(e))


def _job_task(inputs: list[str], ranks: list) -> dict | _Failed:
    """Dask task: the job's document from its ranks; the first failed rank (in input order, as
    the local reader reports it) fails the job."""
    failed = next((r for r in ranks if isinstance(r, _Failed)), None)
    if failed:
        return failed
    try:
        paths = [path for path, _ in ranks]
        exports = ExportSource([Path(p) for p in paths], keep=EXPORTS_HELD) if ranks and ranks[0][1] is None else [e for _, e in ranks]
        return _document(exports, inputs, paths)
    except Exception as e:
        return _Failed(_error_text(e))


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, threads: int | None = None):
    """A client of the scheduler at `scheduler`, or of a LocalCluster on 127.0.0.1 (TCP on loopback,
    so results are serialized as on a real cluster): one worker in this process, whose threads
    read ranks in parallel (the native reader releases the GIL)."""
    from distributed import Client, LocalCluster

    if scheduler:
        try:
            client = Client(scheduler)
        except (OSError, ValueError) as e:  # unreachable (a TimeoutError is an OSError) or not an address
            raise InputError(f"{scheduler}: cannot reach the Dask scheduler: {e}") from None
        with client:
            yield client
        return
    # Logs at ERROR only: the analysis holds the GIL, and the worker's "event loop was
    # unresponsive" warnings would say nothing a user can act on.
    with LocalCluster(host="127.0.0.1", protocol="tcp://", processes=False, n_workers=1,
                      threads_per_worker=threads or os.cpu_count() or 1, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        yield client


def _run_dask(jobs: Iterable[Job], bars: _Bars, nsys, cache_dir, scheduler, threads, client=None) -> Iterator[tuple[Job, dict | str]]:
    """Each job's document (or error text), as jobs finish on the cluster."""
    from distributed import as_completed

    with contextlib.nullcontext(client) if client is not None else dask_client(scheduler, threads) as client:
        pending = iter(jobs)
        owner = {}
        running = as_completed()

        def submit(job: Job) -> None:
            bars.ranks_queued(len(job.inputs))
            ranks = client.map(_rank_task, [str(p) for p in job.inputs], nsys=nsys, keep=len(job.inputs) <= BOUNDED_FROM_RANKS,
                               cache_dir=str(cache_dir) if cache_dir else None, pure=False)
            if bars.progress:
                for f in ranks:
                    f.add_done_callback(lambda _: bars.ranks_read())
            future = client.submit(_job_task, [str(p) for p in job.inputs], ranks, pure=False)
            owner[future.key] = job
            running.add(future)

        # A few jobs in flight: the next jobs' ranks are read while one is analyzed, and a
        # finished job's ranks are released (nothing holds their futures) before more are read.
        for job in itertools.islice(pending, max(2, sum(client.nthreads().values()))):
            submit(job)
        for future in running:
            job, result = owner.pop(future.key), future.result()
            del future
            yield job, result.error if isinstance(result, _Failed) else result
            job = next(pending, None)
            if job is not None:
                submit(job)


def run_batch(root: str | os.PathLike, db_url: str = "sqlite:///collectivetrace.db", pattern: str | None = None,
              executor: str = "local", scheduler: str | None = None, progress: bool = False, *,
              nsys: str | None = None, cache_dir: str | os.PathLike | None = None, threads: int | None = None,
              retry_failed: bool = False, client=None) -> dict:
    """Analyzes every job under root (see find_jobs) into the store at db_url. Returns a summary:
    found, analyzed, skipped, failed (jobs without results: failed now, or failed earlier with the
    same inputs), failed_earlier, seconds, jobs (one dict per job, by name) and errors ({job: error}).
    Raises InputError for an unusable root, store or executor. `threads`: ranks read at once
    (local) or threads of the local Dask worker; `client`: a distributed.Client to use instead of
    `scheduler` (dask)."""
    if executor not in EXECUTORS:
        raise InputError(f"{executor!r} is not an executor: use one of {', '.join(EXECUTORS)}")
    started = time.perf_counter()
    paths = find_jobs(root, pattern)
    if not paths:
        what = f"folder matching {pattern!r}" if pattern else "folder holding .sqlite, .nsys-rep or .qdrep files"
        raise InputError(f"{root}: no jobs found (no {what})")
    engine = open_store(db_url)
    cache_dir = Path(cache_dir) if cache_dir is not None else None
    rows = []
    try:
        with _Bars(progress, len(paths)) as bars:
            todo, jobs = [], {}
            for path in paths:
                job = jobs[str(path)] = _prepare(Path(root).resolve(), path)
                row = {"job": job.name, "path": str(job.path), "inputs": len(job.inputs), "run_id": None, "error": None, "earlier": False}
                if job.error is None and stored_hash(engine, str(job.path)) == job.input_hash:
                    rows.append({**row, "status": "skipped"})
                elif job.error is None and not retry_failed and (error := stored_failure(engine, str(job.path), job.input_hash)):
                    rows.append({**row, "status": "failed", "error": error, "earlier": True})
                else:
                    todo.append(job)
                    continue
                bars.job_done()
            broken = [(job, job.error) for job in todo if job.error is not None]
            todo = [job for job in todo if job.error is None]
            if executor == "local":
                results = _run_local(todo, bars, nsys, cache_dir, threads)
            else:
                results = _run_dask(todo, bars, nsys, cache_dir, scheduler, threads, client)
            for job, result in itertools.chain(broken, results):
                rows.append(_store(engine, job, result))
                bars.job_done()
        # Skipped jobs show the run they were skipped for.
        runs = {(r["job_path"], r["input_hash"], r["status"]): r for r in list_runs(engine)}
        for row, job in ((row, jobs[row["path"]]) for row in rows if row["run_id"] is None):
            run = runs.get((row["path"], job.input_hash, "failed" if row["earlier"] else "ok"), {})
            row.update(run_id=run.get("id"), **{k: run.get(k) for k in _SHOWN})
    finally:
        engine.dispose()
    rows.sort(key=lambda r: r["job"])
    count = lambda status: sum(r["status"] == status for r in rows)  # noqa: E731
    return {
        "root": str(root), "db": display_url(db_url), "executor": executor,
        "found": len(rows), "analyzed": count("analyzed"), "skipped": count("skipped"), "failed": count("failed"),
        "failed_earlier": sum(r["earlier"] for r in rows), "seconds": round(time.perf_counter() - started, 3),
        "jobs": rows, "errors": {r["job"]: r["error"] for r in rows if r["status"] == "failed"},
    }


_SHOWN = ("ranks", "collectives", "wait_ns", "top_blocking_kernel")  # from each run's summary, for the table


def _store(engine, job: Job, result: dict | str) -> dict:
    row = {"job": job.name, "path": str(job.path), "inputs": len(job.inputs), "error": None, "earlier": False}
    failed = isinstance(result, str)
    try:
        try:
            row["run_id"] = write_run(engine, job.path, job.inputs, job.input_hash, result, name=job.name)
        except AlreadyStored:
            raise
        except Exception as e:
            if failed:
                raise
            # Results this store cannot take (the store itself failing fails again, and stops the batch).
            failed, result = True, f"could not store the results: {_error_text(e)}"
            row["run_id"] = write_run(engine, job.path, job.inputs, job.input_hash, result, name=job.name)
        row["status"] = "failed" if failed else "analyzed"
    except AlreadyStored as e:  # another batch stored it meanwhile
        row["run_id"], row["status"] = e.run_id, "failed" if failed else "skipped"
    if failed:
        row["error"] = result
    else:
        row.update({k: result["summary"][k] for k in _SHOWN})
    return row
