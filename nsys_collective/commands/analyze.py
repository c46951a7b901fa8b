"""`collectivetrace-nsys analyze`: read every rank's export and report on them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from nsys_collective.analysis import analyze_exports
from nsys_collective.console import error_edge, stderr, warn
from nsys_collective.inputs import discover, is_report
from nsys_collective.json_output import document
from nsys_collective.reader import read_exports
from nsys_collective.terminal import render


def analyze(
    paths: list[Path] = typer.Argument(..., help="Exports (.sqlite), reports (.nsys-rep, .qdrep) or directories of them."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON (the documented contract) on stdout."),
    nsys: str = typer.Option(None, "--nsys", help="The nsys executable used to export reports (default: nsys on PATH)."),
    cache_dir: Path = typer.Option(None, "--cache-dir", help="Where report exports go when not beside the report."),
    threads: int = typer.Option(None, "--threads", min=1, help="Exports read at once (default: all cores)."),
) -> None:
    """Analyze the NCCL collectives of a job: one export or report per rank, or one with many ranks."""
    with error_edge():
        inputs = discover(paths)
        progress = not as_json and sys.stderr.isatty()
        exports_paths = _exported(inputs, nsys, cache_dir, progress)
        if progress:
            with stderr.status(f"reading {len(exports_paths)} exports"):
                exports = read_exports(exports_paths, threads)
        else:
            exports = read_exports(exports_paths, threads)
        analysis = analyze_exports(exports, [str(p) for p in inputs])
        if as_json:
            typer.echo(json.dumps(document(analysis, [str(p) for p in exports_paths]), indent=2))
        else:
            for w in analysis.warnings:
                warn(w)
            render(analysis)


def _exported(inputs: list[Path], nsys: str | None, cache_dir: Path | None, progress: bool) -> list[Path]:
    """The SQLite export of each input: exports as they are, reports through `nsys export`."""
    reports = [p for p in inputs if is_report(p)]
    if not reports:
        return inputs
    from nsys_collective.nsys_export import export_reports

    exported = dict(zip(reports, export_reports(reports, nsys=nsys, cache_dir=cache_dir, progress=progress)))
    return [exported.get(p, p) for p in inputs]
