"""The `collectivetrace-nsys` command line: one module per command in this package. Each imports
only what its options and help need; the analysis and the renderers load inside the commands, so
`--help` and `--version` load neither numpy nor the readers (tests/unit/test_imports.py).

Results go to stdout; progress, warnings and errors to stderr (see `console.error_edge` for the
exit statuses).
"""

from __future__ import annotations

import sys


def main() -> None:
    """The installed command."""
    if sys.argv[1:] == ["--version"]:
        # The one line alone, without typer and rich (half of the start-up): what scripts ask most.
        from nsys_collective.version import __version__

        print(f"collectivetrace-nsys {__version__}")
        sys.exit(0)
    from nsys_collective.cli.commands import run

    run()


def __getattr__(name: str):
    if name == "app":  # the typer application, loaded where it is used (the tests, `run`)
        from nsys_collective.cli.commands import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
