"""`collectivetrace-nsys batch`: analyze every job under a folder into a results store."""

from __future__ import annotations

from pathlib import Path

import typer


def batch(
    root: Path = typer.Argument(..., help="A folder holding jobs (folders of rank reports or exports)."),
) -> None:
    """Analyze every job under ROOT into a results store (not yet implemented)."""
    raise NotImplementedError
