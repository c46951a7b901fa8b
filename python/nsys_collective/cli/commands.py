"""The command line's commands and options (typer): `collectivetrace-nsys` itself, as `app`, and
the edge where a bad command line becomes one line and exit status 2 (`run`)."""

from __future__ import annotations

import sys

import typer
from typer.core import TyperCommand, TyperGroup

from nsys_collective.cli import analyze, batch, compare, glossary, report
from nsys_collective.cli.console import stderr


class _HelpFlag:
    """typer 0.29 gives the help flag no default, so every command line without `--help` passes
    None through the flag's type coercion, which builds a pydantic adapter for it: pydantic's
    0.15 s of imports in `--help` and `--version`. A flag that is False when absent skips it."""

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None and option.default is None:
            option.default = False
        return option


class _Deferred:
    """What typer 0.29 coerces every parameter's value with, a pydantic adapter (pydantic's 0.12 s
    of imports, in every command), built only for a value that needs converting: the value of an
    option left out (None, or its default as typed) and text for text stand as they are, which is
    what the adapter returns for them (tests/unit/test_imports.py compares the two)."""

    def coerce(self, value, param, ctx):
        annotation = param.type_descriptor.annotation
        many = param.multiple or param.nargs == -1
        if value is None:
            return () if many else None
        if many and annotation == list[str] and isinstance(value, (list, tuple)) and all(type(v) is str for v in value):
            return list(value)
        if not many and type(value) is annotation and (annotation is str or value is param.default):
            return value
        param._runtime_param = None  # typer's own, from now on
        return param.get_runtime_param().coerce(value, param=param, ctx=ctx)


class Group(_HelpFlag, TyperGroup):
    pass


class Command(_HelpFlag, TyperCommand):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for param in self.params:
            if getattr(param, "_runtime_param", False) is None:  # typer's, not built yet
                param._runtime_param = _Deferred()


app = typer.Typer(
    name="collectivetrace-nsys",
    cls=Group,
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
app.command("analyze", cls=Command, short_help=analyze.SUMMARY, epilog=analyze.EPILOG)(analyze.analyze)
app.command("batch", cls=Command, short_help="Analyze every job under a folder into a results store.")(batch.batch)
app.command("compare", cls=Command, short_help="Compare two runs: causes, waits, transfers, stragglers and alignment, A against B.")(compare.compare)
app.command("report", cls=Command, short_help="Render a run stored by batch: report.html, charts and tables.")(report.report)
app.command("glossary", cls=Command, short_help="What each figure of the output means.")(glossary.glossary)


def run() -> None:
    """The command line. A bad command line (an unknown option, a value of the wrong type) is one
    line and exit status 2, like any other bad input, instead of click's usage box."""
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

