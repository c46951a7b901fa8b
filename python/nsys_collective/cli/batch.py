"""`collectivetrace-nsys batch`: analyze every job under a folder into a results store."""

from __future__ import annotations

import enum
import sys
from pathlib import Path

import typer

from nsys_collective.cli.console import EXIT_INTERNAL, error_edge, stderr
from nsys_collective.ingest.limits import DEFAULT_TIMEOUT_S, Limits
from nsys_collective.units import count, duration


# A job name narrower than this wraps in the table, rather than squeeze the figures out.
JOB_MIN = 24


class Executor(str, enum.Enum):
    local = "local"
    dask = "dask"


def batch(
    root: Path = typer.Argument(..., metavar="ROOT", help="A folder holding jobs (folders of rank reports or exports)."),
    db: str = typer.Option("sqlite:///collectivetrace.db", "--db", metavar="URL",
                           help="The results store: any SQLAlchemy URL, e.g. sqlite:///results.db or "
                                "postgresql+psycopg://user@host/db (a bare path is an SQLite file)."),
    pattern: str = typer.Option(None, "--pattern", metavar="GLOB",
                                help="Jobs are the folders matching this glob, relative to ROOT (e.g. 'runs/*'). "
                                     "Default: every folder that directly holds reports or exports."),
    executor: Executor = typer.Option(Executor.local, "--executor",
                                      help="local: one job after another on this machine. dask: ranks and jobs as tasks on a Dask cluster."),
    scheduler: str = typer.Option(None, "--scheduler", metavar="ADDRESS",
                                  help="Dask scheduler address (tcp://host:8786) for --executor dask; default: a local cluster on 127.0.0.1."),
    nsys: str = typer.Option(None, "--nsys", metavar="EXE", help="The nsys executable used to export reports (default: nsys on PATH)."),
    cache_dir: Path = typer.Option(None, "--cache-dir", metavar="DIR", help="Where the tool caches report exports (default: $COLLECTIVETRACE_CACHE, else ~/.cache/collectivetrace-nsys/exports); never beside the report."),
    export_timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--export-timeout", metavar="SECONDS", min=1, help="Stop an `nsys export` of one report that runs longer than this (its whole process group is killed)."),
    retry_failed: bool = typer.Option(False, "--retry-failed", metavar="", help="Analyze again jobs that failed before with the same inputs."),
    max_trace_bytes: int = typer.Option(Limits.max_trace_bytes, "--max-trace-bytes", metavar="BYTES", min=1, help="Refuse a PyTorch profiler trace whose JSON is larger than this."),
    max_gzip_ratio: int = typer.Option(Limits.max_gzip_ratio, "--max-gzip-ratio", metavar="N", min=1, help="Refuse a .json.gz trace that expands more than this many times."),
) -> None:
    """Analyze every job under ROOT into a results store, one run per job with its inputs' hash.
    Jobs already stored with the same inputs are skipped; a broken job is recorded with its error
    and the batch goes on.

    Exit status: 0 when every job has results, 1 when some job failed (named on stderr, recorded in the store), 2 for an unusable ROOT or store.
    """
    from nsys_collective import memory
    from nsys_collective.batch import run_batch

    if scheduler and executor is not Executor.dask:
        raise typer.BadParameter("--scheduler needs --executor dask", param_hint="--scheduler")
    with error_edge():
        memory.one_heap()  # before any thread
        summary = run_batch(root, db, pattern, executor.value, scheduler, progress=stderr if sys.stderr.isatty() else None,
                            nsys=nsys, cache_dir=cache_dir, retry_failed=retry_failed,
                            limits=Limits(max_trace_bytes, max_gzip_ratio), export_timeout=export_timeout)
    _print(summary)
    for job, error in summary["errors"].items():
        stderr.print(f"failed: {job}: {error}", markup=False)
    if summary["failed"]:
        raise typer.Exit(EXIT_INTERNAL)


def _print(summary: dict) -> None:
    """One row per job; job names whole (a pipe gets wide lines), the top cause listed under the
    table when the console has no room for it beside the figures."""
    from nsys_collective.render.terminal import named_table, prose, stdout_console

    out = stdout_console()
    rows = [[r["job"], "failed before" if r["earlier"] else r["status"], _text(r.get("ranks")), _text(r.get("collectives")),
             duration(r["wait_ns"]) if r.get("wait_ns") is not None else "", _text(r["run_id"])] for r in summary["jobs"]]
    for part in named_table(out, "Jobs", ["job", "status", "ranks", "collectives", "wait", "run"], rows,
                            [_text(r.get("top_cause")) or "-" for r in summary["jobs"]], "top cause", at=5,
                            fold={"job": min(JOB_MIN, max((len(r[0]) for r in rows), default=3))}):
        out.print(part)
    out.print(prose(out, f"{count(summary['found'], 'job')}: {summary['analyzed']} analyzed, {summary['skipped']} skipped "
                         f"(already stored), {summary['failed']} failed, {summary['seconds']:.1f} s; store {summary['db']}"), markup=False)


def _text(value) -> str:
    return "" if value is None else str(value)
