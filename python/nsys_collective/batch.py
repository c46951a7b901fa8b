"""`batch`: every job under a folder analyzed into the results store (store).

A job is a folder of inputs of one family (rank reports, exports or PyTorch profiler traces).
Each goes through the same pipeline as `analyze JOB --json` (pipeline.py), so a stored document
equals that command's output. A job already stored with the same input hash is skipped, and so is
one that failed with the same inputs under this tool version (unless retry_failed). A broken job
is recorded with its error and the batch goes on. Only the calling process writes to the store.

Executors:
* local: jobs one after another, each job's inputs read by the native readers in parallel.
* dask: the pipeline's map as a task per input file (export a report if need be, read it, trace
  its ranks: only the traces travel), then its reduce as a task per job; a few jobs in flight at
  once. Without a scheduler address, an in-process LocalCluster on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import DBAPIError

from nsys_collective import causes as cause_kinds
from nsys_collective import pipeline
from nsys_collective.errors import InputError
from nsys_collective.ingest.capture import Limits
from nsys_collective.ingest.discover import find_inputs, find_jobs, shown
from nsys_collective.ingest.formats import DESCRIPTION, readable_paths
from nsys_collective.model.job import Filters
from nsys_collective.result import Result
from nsys_collective.store import (AlreadyStored, display_url, input_hash, list_runs, open_store, stored_failure,
                                   stored_hash, write_run)

EXECUTORS = ("local", "dask")

@dataclass
class Job:
    name: str  # the folder relative to ROOT
    path: Path  # absolute: the store's key for the job, and what the analysis is given
    inputs: list[Path] = dataclasses.field(default_factory=list)
    input_hash: str = ""
    error: str | None = None  # its inputs could not even be listed
    warnings: list[str] = dataclasses.field(default_factory=list)  # discovery's

    @property
    def key(self) -> str:
        """The job's folder as the store keeps it: text, bytes that are no UTF-8 shown escaped."""
        return shown(self.path)


def _error_text(e: BaseException) -> str:
    """One line: the message of unusable input, else the error's type and first line (a
    database's own message, without SQLAlchemy's SQL and "Background" lines)."""
    if isinstance(e, InputError):
        return shown(str(e))  # a path in it may hold bytes that are no UTF-8
    text = str(getattr(e, "orig", None) or e).strip()
    return shown(f"{type(e).__name__}: {text.splitlines()[0] if text else ''}")


def _prepare(root: Path, path: Path) -> Job:
    job = Job(name=shown(path.relative_to(root).as_posix() if path != root else root.name), path=path)
    try:
        job.inputs, job.warnings = find_inputs([path])
        job.input_hash = input_hash(path, job.inputs)
    except Exception as e:
        job.error, job.input_hash = _error_text(e), input_hash(path, [])
    return job


class _Bars:
    """Progress on a console (the CLI's stderr): jobs done, ranks read. Does nothing without one."""

    def __init__(self, console, jobs: int):
        self.progress = None
        if console is not None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description:>5}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), console=console, transient=True)
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


def _run_local(jobs: Iterable[Job], bars: _Bars, nsys, cache_dir, threads, limits: Limits,
               export_timeout: float | None = None) -> Iterator[tuple[Job, Result | str]]:
    """Each job's result (or error text), one job after another."""
    for job in jobs:
        bars.ranks_queued(len(job.inputs))
        try:
            readable = readable_paths(job.inputs, nsys, cache_dir, export_timeout=export_timeout)
            inputs = pipeline.Inputs(reports=job.inputs, readable=readable, limits=limits)
            result = pipeline.reduce(pipeline.map_inputs(inputs, threads, bars.ranks_read), source=job.name, warnings=job.warnings)
        except Exception as e:
            result = _error_text(e)
        yield job, result


def _input_task(path: str, index: int, nsys: str | None, cache_dir: str | None,
                limits: Limits = Limits(), export_timeout: float | None = None) -> pipeline.Traced | BaseException:
    """Dask task: one input exported if need be, read and traced. A failure comes back as a value,
    so that the job fails on its first broken input in input order, as the local executor does."""
    try:
        [readable] = readable_paths([Path(path)], nsys, Path(cache_dir) if cache_dir else None,
                                    export_timeout=export_timeout)
        return pipeline.map_input(readable, index, path, limits)
    except Exception as e:
        return e


def _job_task(traced: list, source: str, warnings: list[str] = ()) -> Result:
    """Dask task: the job's result from its inputs' traces (without the timeline: it stays here)."""
    failed = next((t for t in traced if isinstance(t, BaseException)), None)
    if failed is not None:
        raise failed
    return dataclasses.replace(pipeline.reduce(traced, source=source, warnings=warnings), timeline=None)


def _thin_task(traced, step_pattern: str | None = None):
    """Dask task: what the model needs of an input's traces (pipeline.thin); the traces stay."""
    if isinstance(traced, BaseException):
        raise traced
    return pipeline.thin(traced, step_pattern)


def replay_on_workers(inputs: list[str | os.PathLike], client, *, step_pattern: str | None = None,
                      reduce_started: Callable[[], None] | None = None) -> dict:
    """The job's replay (what the what-if starts from: every collective's arrivals, transfer start
    and wait, every step's and rank's end) with the per-rank work on the Dask workers (issue 22):
    each input is read and traced on a worker, where its traces stay; the client models the job
    from what clock alignment, matching and steps need (pipeline.thin); each rank gets its slice of
    the model (clocks, steps, its collectives) and is condensed on a worker to its max-plus summary;
    the client replays the job over its collectives from the summaries. The reduce holds
    O(ranks x collectives), whatever the ranks' ops. `reduce_started` is called before the thin
    traces come back (what a benchmark measures from: all the reduce holds). Returns the outcome (as ReplayGraph.replay's)
    with ranks (rank numbers, in the outcome's order) and instances (of job.collectives)."""
    from nsys_collective.attribution.blocking import tolerance
    from nsys_collective.attribution.whatif import summaries

    traced = client.map(_input_task, [str(p) for p in inputs], range(len(inputs)), nsys=None, cache_dir=None, pure=False)
    thin = client.map(_thin_task, traced, step_pattern=step_pattern, pure=False)
    if reduce_started:
        reduce_started()
    thin = client.gather(thin)
    where, has_gpu = {}, set()
    for i, ((_, ranks), gpu) in enumerate(thin):
        for k, (t, g) in enumerate(zip(ranks, gpu)):
            where[id(t)] = (i, k)
            if g:
                has_gpu.add(id(t))
    job = pipeline.model([t for t, _ in thin], Filters(steps=step_pattern) if step_pattern else None)
    ranks = [r.rank for r in job.ranks if id(job.traces[r.rank]) in has_gpu]
    if not ranks or not len(job.collectives):
        raise InputError(f"{shown(inputs[0])}: nothing to replay (no collective across ranks with GPU work)")
    del thin
    parts = summaries.slices(job, ranks, tolerance(job))
    futures = [client.submit(pipeline.summarize_rank, traced[where[id(job.traces[s.rank])][0]],
                             where[id(job.traces[s.rank])][1], s, pure=False) for s in parts]
    del traced  # each input's traces go once its ranks are summarized
    rank_summaries = client.gather(futures)
    del futures
    out = summaries.replay(rank_summaries, parts, len(job.collectives.obs_rank), job.collectives.obs_instance)
    return {**out, "ranks": ranks, "instances": len(job.collectives),
            "summary_entries": sum(len(x["input"]) for x in rank_summaries)}


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


def _run_dask(jobs: Iterable[Job], bars: _Bars, nsys, cache_dir, scheduler, threads, limits: Limits,
              client=None, export_timeout: float | None = None) -> Iterator[tuple[Job, Result | str]]:
    """Each job's result (or error text), as jobs finish on the cluster."""
    from distributed import as_completed

    with contextlib.nullcontext(client) if client is not None else dask_client(scheduler, threads) as client:
        pending = iter(jobs)
        owner = {}
        running = as_completed()

        def submit(job: Job) -> None:
            bars.ranks_queued(len(job.inputs))
            traced = client.map(_input_task, [str(p) for p in job.inputs], range(len(job.inputs)), nsys=nsys,
                                cache_dir=str(cache_dir) if cache_dir else None, limits=limits,
                                export_timeout=export_timeout, pure=False)
            if bars.progress:
                for f in traced:
                    f.add_done_callback(lambda _: bars.ranks_read())
            future = client.submit(_job_task, traced, job.name, job.warnings, pure=False)
            owner[future.key] = job
            running.add(future)

        # A few jobs in flight: the next jobs' ranks are read while one is analyzed, and a
        # finished job's ranks are released (nothing holds their futures) before more are read.
        for job in itertools.islice(pending, max(2, sum(client.nthreads().values()))):
            submit(job)
        for future in running:
            job = owner.pop(future.key)
            try:
                result = future.result()
            except Exception as e:
                result = _error_text(e)
            del future
            yield job, result
            job = next(pending, None)
            if job is not None:
                submit(job)


def run_batch(root: str | os.PathLike, db_url: str = "sqlite:///collectivetrace.db", pattern: str | None = None,
              executor: str = "local", scheduler: str | None = None, progress=None, *,
              nsys: str | None = None, cache_dir: str | os.PathLike | None = None, threads: int | None = None,
              retry_failed: bool = False, client=None, limits: Limits = Limits(),
              export_timeout: float | None = None) -> dict:
    """Analyzes every job under root (see find_jobs) into the store at db_url. Returns a summary:
    found, analyzed, skipped, failed (jobs without results: failed now, or failed earlier with the
    same inputs), failed_earlier, seconds, jobs (one dict per job, by name) and errors ({job: error}).
    Raises InputError for an unusable root, store or executor. `threads`: ranks read at once
    (local) or threads of the local Dask worker; `client`: a distributed.Client to use instead of
    `scheduler` (dask); `limits`: what one input may make a reader hold (analyze's --max-* options);
    `export_timeout`: seconds one `nsys export` may take (--export-timeout); `progress`: a rich
    Console to show progress bars on (None: none)."""
    if executor not in EXECUTORS:
        raise InputError(f"{executor!r} is not an executor: use one of {', '.join(EXECUTORS)}")
    started = time.perf_counter()
    paths = find_jobs(root, pattern)
    if not paths:
        what = f"folder matching {pattern!r}" if pattern else f"folder holding {DESCRIPTION}"
        raise InputError(f"{root}: no jobs found (no {what})")
    engine = open_store(db_url)
    cache_dir = Path(cache_dir) if cache_dir is not None else None
    rows = []
    try:
        with _Bars(progress, len(paths)) as bars:
            todo, jobs = [], {}
            for path in paths:
                job = _prepare(Path(root).resolve(), path)
                jobs[job.key] = job
                row = {"job": job.name, "path": job.key, "inputs": len(job.inputs), "run_id": None, "error": None, "earlier": False}
                if job.error is None and stored_hash(engine, job.key) == job.input_hash:
                    rows.append({**row, "status": "skipped"})
                elif job.error is None and not retry_failed and (error := stored_failure(engine, job.key, job.input_hash)):
                    rows.append({**row, "status": "failed", "error": error, "earlier": True})
                else:
                    todo.append(job)
                    continue
                bars.job_done()
            broken = [(job, job.error) for job in todo if job.error is not None]
            todo = [job for job in todo if job.error is None]
            if executor == "local":
                results = _run_local(todo, bars, nsys, cache_dir, threads, limits, export_timeout)
            else:
                results = _run_dask(todo, bars, nsys, cache_dir, scheduler, threads, limits, client, export_timeout)
            for job, result in itertools.chain(broken, results):
                rows.append(_store(engine, job, result))
                bars.job_done()
        # Skipped jobs show the run they were skipped for.
        runs = {(r["job_path"], r["input_hash"], r["status"]): r for r in list_runs(engine)}
        for row, job in ((row, jobs[row["path"]]) for row in rows if row["run_id"] is None):
            run = runs.get((row["path"], job.input_hash, "failed" if row["earlier"] else "ok"), {})
            row.update(run_id=run.get("id"), top_cause=run.get("top_cause"), **{k: run.get(k) for k in _SHOWN})
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


_SHOWN = ("ranks", "collectives", "wait_ns")  # from each run's summary, for the table, with its top cause


def _store(engine, job: Job, result: Result | str) -> dict:
    row = {"job": job.name, "path": job.key, "inputs": len(job.inputs), "error": None, "earlier": False}
    failed = isinstance(result, str)
    try:
        try:
            row["run_id"] = write_run(engine, job.key, job.inputs, job.input_hash, result, name=job.name)
        except AlreadyStored:
            raise
        except Exception as e:
            if failed:
                raise
            # Results this store cannot take now (disk full, ...): recorded as retryable, so the
            # next batch tries again. The store failing even for that stops the batch.
            failed, result = True, f"could not store the results: {_error_text(e)}"
            row["run_id"] = write_run(engine, job.key, job.inputs, job.input_hash, result, name=job.name, retryable=True)
        row["status"] = "failed" if failed else "analyzed"
    except AlreadyStored as e:  # another batch stored it meanwhile
        row["run_id"], row["status"] = e.run_id, "failed" if failed else "skipped"
    except DBAPIError as e:
        raise InputError(f"{display_url(engine.url)}: cannot write to the results store: {_error_text(e)}") from None
    if failed:
        row["error"] = result
    else:
        row.update(top_cause=cause_kinds.column_text(result.summary["top_cause"]), **{k: result.summary[k] for k in _SHOWN})
    return row
