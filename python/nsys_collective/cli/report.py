"""`collectivetrace-nsys report RUN`: the report, charts and tables of a run stored by `batch`."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from nsys_collective.api import DEFAULT_DB
from nsys_collective.cli.analyze import write_out
from nsys_collective.cli.console import error_edge
from nsys_collective.errors import InputError


def report(
    run: int = typer.Argument(..., metavar="RUN", help="The id of a run stored by `collectivetrace-nsys batch` (batch prints it)."),
    db: str = typer.Option(DEFAULT_DB, "--db", metavar="URL", help="The results store (an SQLAlchemy URL, or a path to an SQLite file)."),
    out: Path = typer.Option(..., "--out", metavar="DIR", help="Write tables (CSV, Parquet), charts (PNG, SVG) and report.html into this folder."),
    force: bool = typer.Option(False, "--force", metavar="", help="Replace an --out folder written by an earlier run (never anything else)."),
) -> None:
    """Render a stored run exactly as `analyze --out` rendered it when it was analyzed."""
    with error_edge():
        from nsys_collective.render.outdir import check_target
        from nsys_collective.store import load_result, store_file

        store = store_file(db)
        check_target(out, force, [store] if store else [])
        result = load_result(db, run)
        if result.evidence is None:
            raise InputError(f"run {run} was stored by an older collectivetrace-nsys, without what the report draws; "
                             "run batch again with --retry-failed or analyze its inputs")
        write_out(result, out, force, progress=sys.stderr.isatty(), protect=[store] if store else [])
