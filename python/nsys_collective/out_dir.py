"""`--out DIR`: tables, charts and the HTML report, written whole or not at all.

Everything is written into a temporary folder beside DIR and moved into place at the end, so an
interrupted or failed run leaves no half-written output; an existing DIR that is not empty is
replaced only with --force.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from nsys_collective.errors import InputError


def check_target(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(f"{out}: exists and is not empty; pass --force to replace it")


def write_outputs(analysis, doc: dict, out: Path, force: bool) -> list[Path]:
    """Writes analysis.json, the tables (CSV, Parquet), the charts (PNG, SVG) and report.html."""
    from nsys_collective.charts import write_charts
    from nsys_collective.report_html import write_report
    from nsys_collective.tables import write_tables

    check_target(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (tmp / "analysis.json").write_text(json.dumps(doc, indent=2))
        write_tables(doc, tmp)
        charts_dir = tmp / "charts"
        charts_dir.mkdir()
        charts = write_charts(analysis, doc, charts_dir)
        write_report(analysis, doc, charts, tmp / "report.html")
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
