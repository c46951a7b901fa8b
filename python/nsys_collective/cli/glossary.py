"""`collectivetrace-nsys glossary`: what each figure of the output means."""

from __future__ import annotations

from rich.text import Text

from nsys_collective import glossary as terms


def glossary() -> None:
    """Print what each figure of the output means (the HTML report and `analyze --help` say the same)."""
    from nsys_collective.render.terminal import stdout_console

    out = stdout_console()
    for term, definition in terms.TERMS:
        out.print(Text.assemble((term, "bold"), ": ", definition))
