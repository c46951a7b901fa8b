"""`collectivetrace-nsys compare`: what changed between two runs."""

from __future__ import annotations

import typer


def compare(
    a: str = typer.Argument(..., help="The first run: a job folder, exports, or a run id in the store."),
    b: str = typer.Argument(..., help="The second run."),
) -> None:
    """Compare two runs (not yet implemented)."""
    raise NotImplementedError
