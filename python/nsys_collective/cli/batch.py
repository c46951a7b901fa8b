"""`collectivetrace-nsys batch`: analyze every job under a folder into a results store."""

from __future__ import annotations

import enum
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from nsys_collective.cli.console import EXIT_INTERNAL, error_edge, stderr


class Executor(str, enum.Enum):
    local = "local"
    dask = "dask"


def batch(
    root: Path = typer.Argument(..., help="A folder holding jobs (folders of rank reports or exports)."),
    db: str = typer.Option("sqlite:///collectivetrace.db", "--db",
                           help="The results store: any SQLAlchemy URL, e.g. sqlite:///results.db or "
                                "postgresql+psycopg://user@host/db (a bare path is an SQLite file)."),
    pattern: str = typer.Option(None, "--pattern",
                                help="Jobs are the folders matching this glob, relative to ROOT (e.g. 'runs/*'). "
                                     "Default: every folder that directly holds reports or exports."),
    executor: Executor = typer.Option(Executor.local, "--executor",
                                      help="local: one job after another on this machine. dask: ranks and jobs as tasks on a Dask cluster."),
    scheduler: str = typer.Option(None, "--scheduler",
                                  help="Dask scheduler address (tcp://host:8786) for --executor dask; default: a local cluster on 127.0.0.1."),
    nsys: str = typer.Option(None, "--nsys", help="The nsys executable used to export reports (default: nsys on PATH)."),
    cache_dir: Path = typer.Option(None, "--cache-dir", help="Where report exports go when not beside the report."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Analyze again jobs that failed before with the same inputs."),
) -> None:
    """Analyze every job under ROOT into a results store, one run per job with its inputs' hash.
    Jobs already stored with the same inputs are skipped; a broken job is recorded with its error
    and the batch goes on.

    Exit status: 0 when every job has results, 1 when some job failed (named on stderr, recorded in the store), 2 for an unusable ROOT or store.
    """
    from nsys_collective.batch import run_batch

    if scheduler and executor is not Executor.dask:
        raise typer.BadParameter("--scheduler needs --executor dask", param_hint="--scheduler")
    with error_edge():
        summary = run_batch(root, db, pattern, executor.value, scheduler, progress=sys.stderr.isatty(),
                            nsys=nsys, cache_dir=cache_dir, retry_failed=retry_failed)
    _print(summary)
    for job, error in summary["errors"].items():
        stderr.print(f"failed: {job}: {error}", markup=False)
    if summary["failed"]:
        raise typer.Exit(EXIT_INTERNAL)


def _print(summary: dict) -> None:
    table = Table()
    for name, justify in (("job", "left"), ("status", "left"), ("ranks", "right"), ("collectives", "right"),
                          ("wait ms", "right"), ("top blocking kernel", "left"), ("run", "right")):
        table.add_column(name, justify=justify, no_wrap=name == "status",
                         overflow="ellipsis" if name == "top blocking kernel" else "fold")
    for r in summary["jobs"]:
        status = "failed before" if r["earlier"] else r["status"]
        wait = r.get("wait_ns")
        table.add_row(r["job"], status, _text(r.get("ranks")), _text(r.get("collectives")),
                      "" if wait is None else f"{wait / 1e6:,.3f}", _text(r.get("top_blocking_kernel")), _text(r["run_id"]))
    out = Console(highlight=False, soft_wrap=True)
    out.print(table)
    out.print(f"{summary['found']} jobs: {summary['analyzed']} analyzed, {summary['skipped']} skipped (already stored), "
              f"{summary['failed']} failed, {summary['seconds']:.1f} s; store {summary['db']}", markup=False)


def _text(value) -> str:
    return "" if value is None else str(value)
