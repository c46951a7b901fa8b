"""`collectivetrace-nsys analyze`: read every rank's export, model the job, say what blocked it."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import typer
from rich.markup import escape

# Only what the help shows at the top; the analysis and each output's renderer load where the
# command line chose them (tests/unit/test_imports.py holds `--help` and `--json` to it).
from nsys_collective import glossary
from nsys_collective.cli.console import error_edge, stderr, warn
from nsys_collective.errors import InputError
from nsys_collective.ingest.limits import DEFAULT_TIMEOUT_S, Limits
from nsys_collective.units import count


SUMMARY = "Analyze the NCCL collectives of a job: what blocked them, on which rank, and what fixing it saves."

EPILOG = "\n\n".join([
    "Exit status: 0 on success (also when no NCCL work is found: a warning says so); 1 for an internal error "
    "(COLLECTIVETRACE_DEBUG=1 shows the traceback); 2 for unusable input or command line, with one line on stderr.",
    "Examples:\n"
    "  collectivetrace-nsys analyze reports/\n"
    "  collectivetrace-nsys analyze reports/ --json > job.json\n"
    "  collectivetrace-nsys analyze job/ --steps 'ProfilerStep#*' --out report/\n"
    "  collectivetrace-nsys analyze job/ --ranks 0-7 --perfetto job.trace.json",
    "What the figures mean (also: collectivetrace-nsys glossary):\n"
    + "\n".join(f"[bold]{escape(term)}[/bold]: {escape(definition)}" for term, definition in glossary.TERMS),
])


def analyze(
    # Text, not Path: Path("") would be the current folder, and an empty argument is a mistake.
    paths: list[str] = typer.Argument(..., metavar="PATH", help="Exports (.sqlite), reports (.nsys-rep, .qdrep) or PyTorch profiler traces (.json, .json.gz), directories of them, or glob patterns."),
    as_json: bool = typer.Option(False, "--json", metavar="", help="Print the results as JSON (the documented contract) on stdout."),
    out: Path = typer.Option(None, "--out", metavar="DIR", help="Write tables (CSV, Parquet), charts (PNG, SVG) and report.html into this folder."),
    force: bool = typer.Option(False, "--force", metavar="", help="Replace an --out folder or --perfetto file written by an earlier run (never anything else)."),
    perfetto: Path = typer.Option(None, "--perfetto", metavar="FILE", help="Write the aligned timeline as a Perfetto/Chrome trace (JSON)."),
    ranks: str = typer.Option(None, "--ranks", metavar="RANKS", help="Only these ranks, e.g. 0-3,7."),
    hosts: str = typer.Option(None, "--hosts", metavar="HOSTS", help="Only ranks on these hosts (comma-separated, wildcards allowed)."),
    window: str = typer.Option(None, "--window", metavar="START:END", help="Only collectives starting in START:END, seconds from the start of the capture."),
    steps: str = typer.Option(None, "--steps", metavar="PATTERN", help="Steps are the NVTX ranges matching this pattern (default 'ProfilerStep#*'): only collectives inside complete ones, with per-step results."),
    keep_all: bool = typer.Option(False, "--all", metavar="", help="Keep every collective: incomplete steps and what lies outside steps too."),
    nsys: str = typer.Option(None, "--nsys", metavar="EXE", help="The nsys executable used to export reports (default: nsys on PATH)."),
    cache_dir: Path = typer.Option(None, "--cache-dir", metavar="DIR", help="Where the tool caches report exports (default: $COLLECTIVETRACE_CACHE, else ~/.cache/collectivetrace-nsys/exports); never beside the report."),
    export_timeout: float = typer.Option(DEFAULT_TIMEOUT_S, "--export-timeout", metavar="SECONDS", min=1, help="Stop an `nsys export` of one report that runs longer than this (its whole process group is killed)."),
    threads: int = typer.Option(None, "--threads", metavar="N", help="Exports read at once (default: all cores; at most 4 per core)."),
    max_trace_bytes: int = typer.Option(Limits.max_trace_bytes, "--max-trace-bytes", metavar="BYTES", min=1, help="Refuse a PyTorch profiler trace whose JSON is larger than this."),
    max_gzip_ratio: int = typer.Option(Limits.max_gzip_ratio, "--max-gzip-ratio", metavar="N", min=1, help="Refuse a .json.gz trace that expands more than this many times."),
    nic_gbps: float = typer.Option(None, "--nic-gbps", metavar="GBPS", help="The speed of the NIC each GPU uses, in Gb/s (e.g. 400): no capture records it; with it, collectives across hosts get the network's capacity and their share of it (link_share)."),
) -> None:
    """Analyze the NCCL collectives of a job: one export or report per rank, or one with many ranks."""
    with error_edge():
        from nsys_collective import memory, outputs, pipeline
        from nsys_collective.ingest.discover import discover
        from nsys_collective.model.job import Filters

        memory.one_heap()  # before any thread

        try:
            filters = Filters.parse(ranks=ranks, hosts=hosts, window=window, steps=steps, keep_all=keep_all)
        except ValueError as e:
            raise InputError(str(e)) from None
        pipeline.check_threads(threads)
        pipeline.check_nic_gbps(nic_gbps)
        # Refuse unwritable outputs before any work, never writing over an input.
        reports = discover(paths)
        if out is not None and perfetto is not None:
            outputs.check_apart(out, perfetto, "--out", "--perfetto")
        if out is not None:
            from nsys_collective.render.outdir import check_target, start_chart_processes

            check_target(out, force, reports)
            start_chart_processes()  # they load matplotlib while the inputs are read (before any thread)
        if perfetto is not None:
            from nsys_collective.render.perfetto import write_trace, written_by_us

            outputs.check_file(perfetto, force, reports, ours=written_by_us)
        progress = not as_json and sys.stderr.isatty()
        pipeline.prefetch_reduce()  # the reduce's imports load while the inputs are read
        inputs = pipeline.prepare(paths, nsys, cache_dir, progress, Limits(max_trace_bytes, max_gzip_ratio), export_timeout)
        total = len(inputs.readable)
        with _stage(progress, f"reading {count(total, 'input')}") as status:
            read = [0]

            def on_read(n: int) -> None:
                read[0] += n
                status.update(f"reading {count(total, 'input')}: {read[0]} read and traced")

            traced = pipeline.map_inputs(inputs, threads, on_read=on_read if status else None)
        with _stage(progress, "matching, aligning and attributing"):
            result = pipeline.reduce(traced, filters, pipeline.source_of(paths), inputs.warnings, nic_gbps)
        # Files first: a reader of stdout that stops early (| head) must not cost the report.
        if out is not None:
            write_out(result, out, force, progress, inputs.readable)
        if perfetto is not None:
            with _stage(progress, f"writing {perfetto}"):
                write_trace(result, perfetto, force, inputs.readable)
            stderr.print(f"wrote {perfetto} (open it in ui.perfetto.dev)", markup=False)
        if as_json:
            typer.echo(result.to_json())
        else:
            from nsys_collective.render.terminal import render

            for w in result.document.warnings:
                warn(w)
            render(result)


def write_out(result, out: Path, force: bool, progress: bool, protect=()) -> None:
    """`--out DIR`: the report, charts and tables of a result (analyze, report); never over
    `protect` nor the result's inputs."""
    from nsys_collective.render.outdir import write_outputs

    with _stage(progress, f"writing {out}") as status:
        drawn = (lambda k, n: status.update(f"writing {out}: {k} of {n} charts drawn")) if status else None
        write_outputs(result, out, force, protect, on_chart=drawn)
    stderr.print(f"wrote {out}/report.html, tables and charts", markup=False)


def _stage(enabled: bool, what: str):
    """A spinner on stderr while a stage runs, only for a person at a terminal."""
    return stderr.status(what) if enabled else contextlib.nullcontext()
