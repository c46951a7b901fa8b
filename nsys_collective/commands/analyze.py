"""`collectivetrace-nsys analyze`: read every rank's export, model the job, say what blocked it."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from pathlib import Path

import typer

from nsys_collective.analysis import Filters, analyze_exports
from nsys_collective.console import error_edge, stderr, warn
from nsys_collective.inputs import discover, is_report
from nsys_collective.json_output import document
from nsys_collective.reader import read_exports
from nsys_collective.terminal import render


def _rank_set(text: str | None) -> set[int] | None:
    """'0-3,7' -> {0, 1, 2, 3, 7}."""
    if text is None:
        return None
    ranks: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            ranks.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a list of ranks such as 0-3,7") from None
    return ranks


def _window(text: str | None) -> tuple[float, float] | None:
    """'1.5:3' -> (1.5, 3.0) seconds; either end may be left out."""
    if text is None:
        return None
    lo, sep, hi = text.partition(":")
    try:
        window = (float(lo) if lo else 0.0, float(hi) if hi else math.inf)
    except ValueError:
        window = None
    if not sep or window is None or window[0] > window[1]:
        raise typer.BadParameter(f"{text!r} is not a window START:END in seconds from the start of the capture")
    return window


def analyze(
    paths: list[Path] = typer.Argument(..., help="Exports (.sqlite), reports (.nsys-rep, .qdrep), directories of them, or glob patterns."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON (the documented contract) on stdout."),
    out: Path = typer.Option(None, "--out", help="Write tables (CSV, Parquet), charts (PNG, SVG) and report.html into this folder."),
    force: bool = typer.Option(False, "--force", help="Replace a non-empty --out folder."),
    perfetto: Path = typer.Option(None, "--perfetto", help="Write the aligned timeline as a Perfetto/Chrome trace (JSON)."),
    ranks: str = typer.Option(None, "--ranks", help="Only these ranks, e.g. 0-3,7."),
    hosts: str = typer.Option(None, "--hosts", help="Only ranks on these hosts (comma-separated, wildcards allowed)."),
    window: str = typer.Option(None, "--window", help="Only collectives starting in START:END, seconds from the start of the capture."),
    steps: str = typer.Option(None, "--steps", help="Only collectives inside NVTX ranges matching this pattern, with per-step results, e.g. 'ProfilerStep#*'."),
    nsys: str = typer.Option(None, "--nsys", help="The nsys executable used to export reports (default: nsys on PATH)."),
    cache_dir: Path = typer.Option(None, "--cache-dir", help="Where report exports go when not beside the report."),
    threads: int = typer.Option(None, "--threads", min=1, help="Exports read at once (default: all cores)."),
) -> None:
    """Analyze the NCCL collectives of a job: one export or report per rank, or one with many ranks."""
    filters = Filters(ranks=_rank_set(ranks), hosts=[h.strip() for h in hosts.split(",")] if hosts else None,
                      window_s=_window(window), steps=steps)
    with error_edge():
        if out is not None:
            from nsys_collective.out_dir import check_target

            check_target(out, force)  # refuse before any work, not after
        inputs = discover(paths)
        progress = not as_json and sys.stderr.isatty()
        exports_paths = _exported(inputs, nsys, cache_dir, progress)
        with _stage(progress, f"reading {len(exports_paths)} exports"):
            exports = read_exports(exports_paths, threads)
        with _stage(progress, "matching, aligning and attributing"):
            analysis = analyze_exports(exports, [str(p) for p in inputs], filters)
            doc = document(analysis, [str(p) for p in exports_paths])
        # Files first: a reader of stdout that stops early (| head) must not cost the report.
        if out is not None:
            from nsys_collective.out_dir import write_outputs

            with _stage(progress, f"writing {out}"):
                write_outputs(analysis, doc, out, force)
            stderr.print(f"wrote {out}/report.html, tables and charts", markup=False)
        if perfetto is not None:
            from nsys_collective.perfetto import write_trace

            with _stage(progress, f"writing {perfetto}"):
                write_trace(analysis, perfetto)
            stderr.print(f"wrote {perfetto} (open it in ui.perfetto.dev)", markup=False)
        if as_json:
            typer.echo(json.dumps(doc, indent=2))
        else:
            for w in analysis.warnings:
                warn(w)
            render(analysis)


def _stage(enabled: bool, what: str):
    """A spinner on stderr while a stage runs, only for a person at a terminal."""
    return stderr.status(what) if enabled else contextlib.nullcontext()


def _exported(inputs: list[Path], nsys: str | None, cache_dir: Path | None, progress: bool) -> list[Path]:
    """The SQLite export of each input: exports as they are, reports through `nsys export`."""
    reports = [p for p in inputs if is_report(p)]
    if not reports:
        return inputs
    from nsys_collective.nsys_export import export_reports

    exported = dict(zip(reports, export_reports(reports, nsys=nsys, cache_dir=cache_dir, progress=progress)))
    return [exported.get(p, p) for p in inputs]
