"""`collectivetrace-nsys compare`: what changed between two runs."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from nsys_collective.api import DEFAULT_DB, compare_runs, load, parse_source
from nsys_collective.cli.console import error_edge, stderr, warn


def compare(
    a: str = typer.Argument(..., metavar="A", help="The first run (the baseline): a job folder, exports, reports, a quoted glob, or a run id in the store."),
    b: str = typer.Argument(..., metavar="B", help="The second run, compared against the first (deltas are B - A)."),
    as_json: bool = typer.Option(False, "--json", metavar="", help="Print the comparison as JSON on stdout."),
    db: str = typer.Option(DEFAULT_DB, "--db", metavar="URL", help="The results store run ids are looked up in (an SQLAlchemy URL)."),
    chart: Path = typer.Option(None, "--chart", metavar="FILE", help="Write a chart of the comparison as FILE.png and FILE.svg (in an existing folder)."),
    force: bool = typer.Option(False, "--force", metavar="", help="Replace chart files written by an earlier compare (never anything else)."),
    nsys: str = typer.Option(None, "--nsys", metavar="EXE", help="The nsys executable used to export reports (default: nsys on PATH)."),
) -> None:
    """Compare two runs: blocking causes, waits and transfers per operation, stragglers and clock
    alignment, A against B. An integer that names no file is a run id in the store."""
    with error_edge():
        from nsys_collective import memory, outputs
        from nsys_collective.render.outdir import input_paths

        memory.one_heap()  # before any thread: a run given as reports is analyzed
        run_a = load(parse_source(a), db=db, nsys=nsys)
        run_b = load(parse_source(b), db=db, nsys=nsys)
        protect = [*input_paths(run_a), *input_paths(run_b)]
        if chart is not None:  # refused before any work on the comparison
            from nsys_collective.render.compare import chart_written_by_us  # matplotlib: only for a chart

            stem = chart.with_suffix("")
            for path in (stem.with_suffix(".png"), stem.with_suffix(".svg")):
                outputs.check_file(path, force, protect, chart_written_by_us)
        diff = compare_runs(run_a, run_b)
        # Files first: a reader of stdout that stops early (| head) must not cost the chart.
        if chart is not None:
            png, svg = diff.chart(chart, force, protect)
            stderr.print(f"wrote {png} and {svg}", markup=False)
        if as_json:
            typer.echo(json.dumps(diff.doc, indent=2))
        else:
            for w in _warnings(run_a, run_b):
                warn(w)
            diff.render()


def _warnings(*runs) -> list[str]:
    """Each run's own warnings, saying which run they belong to."""
    return [f"{name}: {w}" for name, run in zip("AB", runs) for w in run.document.warnings]
