"""`--out DIR`: tables, charts and the HTML report, written whole or not at all.

Everything is written into a temporary folder beside DIR and moved into place at the end, so an
interrupted or failed run leaves no half-written output; an existing DIR that is not empty is
replaced only with --force.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from nsys_collective.errors import InputError
from nsys_collective.result import Result


def check_target(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(f"{out}: exists and is not empty; pass --force to replace it")


def write_outputs(result: Result, out: Path, force: bool) -> list[Path]:
    """Writes analysis.json, the tables (CSV, Parquet), the charts (PNG, SVG) and report.html."""
    from nsys_collective.render.charts import write_charts
    from nsys_collective.render.html import write_report
    from nsys_collective.render.tables import write_tables

    check_target(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (tmp / "analysis.json").write_text(result.to_json())
        write_tables(result, tmp)
        charts_dir = tmp / "charts"
        charts_dir.mkdir()
        charts = write_charts(result, charts_dir)
        write_report(result, charts, tmp / "report.html")
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the result is an ordinary folder
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(p for p in out.rglob("*") if p.is_file())
