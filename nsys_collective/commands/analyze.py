"""`collectivetrace-nsys analyze`: read every rank's export and report on them."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from nsys_collective import __version__
from nsys_collective.console import error_edge, stderr, warn
from nsys_collective.inputs import discover, is_report
from nsys_collective.ranks import Rank, find_ranks
from nsys_collective.reader import read_exports

JSON_SCHEMA_VERSION = 1


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
        reports = [str(p) for p in inputs]
        ranks, warnings = find_ranks(exports, reports)
        warnings = [f"{r}: {w}" for e, r in zip(exports, reports) for w in e.warnings] + warnings
        if not as_json:
            for w in warnings:
                warn(w)
        result = {
            "schema_version": JSON_SCHEMA_VERSION,
            "tool_version": __version__,
            "inputs": [
                {"path": r, "export": str(p), "nsys_version": e.session.nsys_version, "schema": e.session.schema_version}
                for r, p, e in zip(reports, exports_paths, exports)
            ],
            "ranks": [_rank_json(r) for r in ranks],
            "warnings": warnings,
        }
        if as_json:
            typer.echo(json.dumps(result, indent=2))
        else:
            _print_ranks(ranks)


def _exported(inputs: list[Path], nsys: str | None, cache_dir: Path | None, progress: bool) -> list[Path]:
    """The SQLite export of each input: exports as they are, reports through `nsys export`."""
    reports = [p for p in inputs if is_report(p)]
    if not reports:
        return inputs
    from nsys_collective.nsys_export import export_reports

    exported = dict(zip(reports, export_reports(reports, nsys=nsys, cache_dir=cache_dir, progress=progress)))
    return [exported.get(p, p) for p in inputs]


def _rank_json(rank: Rank) -> dict:
    out = asdict(rank)
    # Filled by clock alignment (a later stage); null, not a made-up zero, until then.
    out["clock_offset_ns"] = None
    out["clock_drift_ppm"] = None
    return out


def _ms(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.3f}"


def _print_ranks(ranks: list[Rank]) -> None:
    table = Table(title=f"{len(ranks)} ranks", title_justify="left")
    for column, justify in [("rank", "right"), ("report", "left"), ("host", "left"), ("pid", "right"), ("device", "right"),
                            ("kernels", "right"), ("NCCL kernels", "right"), ("NCCL ms", "right"), ("span ms", "right")]:
        table.add_column(column, justify=justify)
    for r in ranks:
        span = None if r.first_ns is None else r.last_ns - r.first_ns
        table.add_row(str(r.rank), Path(r.report).name, r.host or "-", str(r.pid) if r.pid is not None else "-",
                      str(r.device) if r.device is not None else "-", f"{r.kernels:,}", f"{r.nccl_kernels:,}",
                      _ms(r.nccl_time_ns), _ms(span))
    # A pipe gets every column in full, not a table squeezed to 80 characters.
    Console(width=None if sys.stdout.isatty() else 240).print(table)
