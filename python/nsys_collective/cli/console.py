"""Where everything but results goes: stderr, and the edge where errors become exit statuses."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator

import typer
from rich.console import Console

from nsys_collective.errors import InputError
from nsys_collective.render.text import wrap

EXIT_INTERNAL = 1
EXIT_INPUT = 2

# A terminal wraps between words (rich); a pipe or log file gets each message on one line.
stderr = Console(stderr=True, highlight=False, soft_wrap=not sys.stderr.isatty())


def warn(message: str) -> None:
    text = f"warning: {message}"
    stderr.print(text if stderr.soft_wrap else wrap(text, stderr.width), markup=False)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A Python warning (numpy's RuntimeWarnings, a chart left out) as one `warning:` line,
    without the source line Python would print."""
    text = str(message).strip()
    warn(text.splitlines()[0] if text else category.__name__)


@contextlib.contextmanager
def error_edge() -> Iterator[None]:
    """Unusable input: one line on stderr, exit 2. Anything else: one line, exit 1; the traceback
    only with COLLECTIVETRACE_DEBUG=1. Warnings: one line each."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = _show_warning
        with _errors():
            yield


@contextlib.contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except InputError as e:
        # One line, whatever a name in it holds.
        stderr.print("error: " + str(e).replace("\r", "\\r").replace("\n", "\\n"), markup=False)
        raise typer.Exit(EXIT_INPUT) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as e:
        if os.environ.get("COLLECTIVETRACE_DEBUG"):
            raise
        text = str(e).strip()
        first = text.splitlines()[0] if text else ""  # the rest (SQL, context) is for the traceback
        stderr.print(f"internal error: {type(e).__name__}: {first} (COLLECTIVETRACE_DEBUG=1 shows a traceback)", markup=False)
        raise typer.Exit(EXIT_INTERNAL) from None
