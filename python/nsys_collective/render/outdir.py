"""`--out DIR`: tables, charts and the HTML report, written whole or not at all.

Everything is written into a temporary folder beside DIR and moved into place at the end, so an
interrupted or failed run leaves no half-written output. DIR is never an input or a folder
holding one, and an existing DIR is replaced only with --force and only when this tool wrote it
(see nsys_collective.outputs).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from nsys_collective import outputs
from nsys_collective.result import Result


def check_target(out: Path, force: bool, protect: Iterable[str | os.PathLike] = ()) -> None:
    """Refuse (InputError) an --out folder that must not be written, before any work."""
    outputs.check_folder(out, force, protect)


def input_paths(result: Result) -> list[str]:
    """The files a result was analyzed from (reports and what was read of them): never replaced."""
    return [p for i in result.document.inputs for p in (i.path, i.export)]


def write_outputs(result: Result, out: Path, force: bool, protect: Iterable[str | os.PathLike] = ()) -> list[Path]:
    """Writes analysis.json, the tables (CSV, Parquet), the charts (PNG, SVG) and report.html."""
    from nsys_collective.render.charts import write_charts
    from nsys_collective.render.html import write_report
    from nsys_collective.render.tables import write_tables

    def fill(tmp: Path) -> None:
        (tmp / "analysis.json").write_text(result.to_json())
        write_tables(result, tmp)
        charts_dir = tmp / "charts"
        charts_dir.mkdir()
        charts = write_charts(result, charts_dir)
        write_report(result, charts, tmp / "report.html")

    outputs.write_folder(out, force, [*input_paths(result), *protect], fill)
    return sorted(p for p in out.rglob("*") if p.is_file() and p.name != outputs.MARKER)
