"""The `collectivetrace-nsys` command line: one module per command in this package. Each imports
only what its options and help need; the analysis and the renderers load inside the commands, so
`--help` and `--version` load neither numpy nor the readers (tests/unit/test_imports.py).

Results go to stdout; progress, warnings and errors to stderr (see `console.error_edge` for the
exit statuses).
"""

from __future__ import annotations

import sys

import typer

from nsys_collective.cli import analyze, batch, compare, glossary, report
from nsys_collective.cli.console import stderr

app = typer.Typer(
    name="collectivetrace-nsys",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from nsys_collective.version import __version__  # importlib.metadata: only when asked

        typer.echo(f"collectivetrace-nsys {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", metavar="", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Which CUDA kernels block your NCCL collectives, on which rank, by how much: cross-rank
    analysis of Nsight Systems reports and PyTorch profiler traces."""


# One line each in the command list (a docstring's line breaks would show there).
app.command("analyze", short_help=analyze.SUMMARY, epilog=analyze.EPILOG)(analyze.analyze)
app.command("batch", short_help="Analyze every job under a folder into a results store.")(batch.batch)
app.command("compare", short_help="Compare two runs: causes, waits, transfers, stragglers and alignment, A against B.")(compare.compare)
app.command("report", short_help="Render a run stored by batch: report.html, charts and tables.")(report.report)
app.command("glossary", short_help="What each figure of the output means.")(glossary.glossary)


def main() -> None:
    """The installed command. A bad command line (an unknown option, a value of the wrong type) is
    one line and exit status 2, like any other bad input, instead of click's usage box."""
    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        stderr.print("aborted", markup=False)
        code = 1
    except Exception as e:
        # Click's usage errors, told by what they have: typer may vendor its own click.
        if not (hasattr(e, "format_message") and isinstance(getattr(e, "exit_code", None), int)):
            raise
        if type(e).__name__ == "NoArgsIsHelpError":  # the command alone: its help
            e.show()
        else:
            ctx = getattr(e, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            stderr.print(f"error: {' '.join(e.format_message().split())}{hint}", markup=False)
        code = e.exit_code
    sys.exit(code or 0)

