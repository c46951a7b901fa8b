"""`collectivetrace-nsys analyze`: read every rank's export, model the job, say what blocked it."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import typer

from nsys_collective.analysis import Filters, analyze_exports
from nsys_collective.console import error_edge, stderr, warn
from nsys_collective.inputs import discover, exports_of, read_inputs
from nsys_collective.json_output import document
from nsys_collective.terminal import render


def analyze(
    paths: list[Path] = typer.Argument(..., help="Exports (.sqlite), reports (.nsys-rep, .qdrep) or PyTorch profiler traces (.json, .json.gz), directories of them, or glob patterns."),
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
    try:
        filters = Filters.parse(ranks=ranks, hosts=hosts, window=window, steps=steps)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    with error_edge():
        if out is not None:
            from nsys_collective.out_dir import check_target

            check_target(out, force)  # refuse before any work, not after
        inputs = discover(paths)
        progress = not as_json and sys.stderr.isatty()
        exports_paths = exports_of(inputs, nsys, cache_dir, progress)
        with _stage(progress, f"reading {len(exports_paths)} inputs"):
            exports = read_inputs(exports_paths, threads)
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
