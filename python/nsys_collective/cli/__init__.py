"""The `collectivetrace-nsys` command line: one module per command in this package.

Results go to stdout; progress, warnings and errors to stderr (see `console.error_edge` for the
exit statuses).
"""

from __future__ import annotations

import typer

from nsys_collective import __version__
from nsys_collective.cli import analyze, batch, compare, report

app = typer.Typer(
    name="collectivetrace-nsys",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"collectivetrace-nsys {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Which CUDA kernels block your NCCL collectives, on which rank, by how much: cross-rank
    analysis of Nsight Systems reports."""


app.command("analyze")(analyze.analyze)
app.command("batch")(batch.batch)
app.command("compare")(compare.compare)
app.command("report")(report.report)


def main() -> None:
    app()
